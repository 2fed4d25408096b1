"""Example specs of contract v3's input side, judged end to end on CPU ranks by tests/test_contract_v3.py.

Not part of the suite (no task uses these features yet): each is addressed by its dotted import path,
`contract_v3_tasks.<name>` (pkb_env/task.py), with this folder's parent on the judge's PYTHONPATH.
docs/task_contract.md's "Contract v3" sections show them as worked examples.
"""
