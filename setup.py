"""Package discovery for the design-card layout.

The repository keeps `tasks/`, `rewards/`, `agents/` and `configs/` at the top level (one folder per
concern), but installs them under the `pkb_env` namespace (`pkb_env.tasks`, `pkb_env.rewards`, ...)
so that they can never collide with PyPI's `agents`, `rewards` or `tasks` packages. pyproject.toml
cannot express a renamed folder that grows a subpackage per task, so the mapping is applied here; the
table itself is pkb_env/layout.py, which the cells read too (run as a script: no package import here).
"""
import runpy
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
MAPPED = runpy.run_path(str(ROOT / "pkb_env" / "layout.py"))["MAPPED"]


def subpackages(prefix: str, folder: Path) -> list[str]:
    found = []
    for init in sorted(folder.rglob("__init__.py")):
        rel = init.parent.relative_to(folder)
        found.append(".".join((prefix, *rel.parts)) if rel.parts else prefix)
    return found


packages = subpackages("pkb_env", ROOT / "pkb_env")
for name, folder in MAPPED.items():
    packages += subpackages(name, ROOT / folder)

setup(
    packages=packages,
    package_dir={"pkb_env": "pkb_env", **MAPPED},
    package_data={"pkb_env.configs": ["**/*.yaml"], "pkb_env.tasks": ["*/*.md"],
                  "pkb_env.solutions": ["examples/*.py", "experts/*.py", "experts/*.md"]},
    include_package_data=True,
)
