"""Where the package's parts live in a checkout: one table read by setup.py and by the cells.

The repository keeps `tasks/`, `rewards/`, `agents/` and `configs/` at the top level (one folder per
concern) and installs them under the `pkb_env` namespace (`pkb_env.tasks`, ...), so that they can never
collide with PyPI's `agents`, `rewards` or `tasks` packages. setup.py reads this file without importing
the package (it runs it as a script); a cell (sandbox/rootfs.py) reads it to find those folders
wherever an editable install left them. This module imports nothing.
"""

MAPPED = {"pkb_env.tasks": "tasks", "pkb_env.rewards": "rewards", "pkb_env.agents": "agents",
          "pkb_env.configs": "configs"}
