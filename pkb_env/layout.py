"""Where the package's parts live in a checkout, and which of them a cell shows: one table read by setup.py and
by the cells.

The repository keeps `tasks/`, `rewards/`, `agents/`, `solutions/` and `configs/` at the top level (one folder
per concern) and installs them under the `pkb_env` namespace (`pkb_env.tasks`, ...), so that they can never
collide with PyPI's `agents`, `rewards` or `tasks` packages. setup.py reads this file without importing the
package (it runs it as a script); a cell (sandbox/rootfs.py) reads it to find those folders wherever an
editable install left them. This module imports nothing.

`IN_CELLS` names what a rank or a build imports; every other mapped folder is hidden from cells, wherever it is
installed: `solutions` is an answer key (expert and example solutions), and policies, recipes, rewards and
configs are not needed to run a rank (docs/containment.md, "No answer key in reach").
"""

MAPPED = {"pkb_env.tasks": "tasks", "pkb_env.rewards": "rewards", "pkb_env.agents": "agents",
          "pkb_env.solutions": "solutions", "pkb_env.configs": "configs"}
IN_CELLS = ("pkb_env", "pkb_env.tasks")
