"""The task suite: one subpackage per task (`reference.py` shown to the agent, `spec.py` for the judge).

See `pkb_env.task` for the contract.
"""
