"""Where the package's parts live in a checkout: one table read by setup.py and by the cells.

The repository keeps `tasks/`, `rewards/`, `agents/` and `configs/` at the top level (one folder per
concern) and installs them under the `pkb_env` namespace (`pkb_env.tasks`, ...), so that they can never
collide with PyPI's `agents`, `rewards` or `tasks` packages. setup.py reads this file without importing
the package (it runs it as a script); a cell (sandbox/rootfs.py) reads it to find those folders
wherever an editable install left them. This module imports nothing.
"""

MAPPED = {"pkb_env.tasks": "tasks", "pkb_env.rewards": "rewards", "pkb_env.agents": "agents",
          "pkb_env.configs": "configs"}

TASK_DIRS = "PKB_ENV_TASK_DIRS"
"""An environment variable: directories (os.pathsep-separated, absolute) whose task folders join the suite
as `pkb_env.tasks.<name>`, in the judge, the zygote and every rank alike (the cells bind them read-only).
For tasks that exist to test the contract (tests/contract_tasks/, through tests/conftest.py's
`contract_tasks` fixture); the suite itself is tasks/ alone."""


def task_dirs(environ) -> list[str]:
    """The directories TASK_DIRS names in `environ` (a mapping of environment variables)."""
    return [d for d in environ.get(TASK_DIRS, "").split(":") if d.startswith("/")]
