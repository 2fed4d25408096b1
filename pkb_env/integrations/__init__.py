"""Adapters that let RL trainers use the judge where their users already are (docs/integrations.md).

Each adapter is a thin client of the JudgeService (docs/architecture.md, "The service"), behind its own
extra, exercised in tests/test_integrations.py by the trainer's own code:

* `pkb_env.integrations.verl`: `compute_score`, verl's custom reward function (`pip install 'pkb-env[verl]'`);
* `pkb_env.integrations.skyrl`: `PkbTextEnv`, a SkyRL-Gym text env registered as "pkb_env" (`[skyrl]`).

Trainers make these objects many times per process (a reward call per sample, an env per trajectory),
while a judge owns rank processes that take seconds to start: `shared` keeps one judge per process and
judge config for all of them.
"""
