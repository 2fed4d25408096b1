"""Solutions as data (installed as `pkb_env.solutions`): what the environment's own users read, never a rank.

* `experts/<task>.py`: expert kernels for the tasks that have one (experts/README.md says how each works): the
  GPU tests' and benchmarks' candidates, and training data (SFT rows, the good half of preference pairs).
* `examples/<name>.py`: small candidates of the demo, the tests and the toy training menus: a ring of
  send/recv for all_reduce, wrong variants for the wrong half of a pair.

They are an answer key, so no cell shows them (docs/containment.md, "No answer key in reach"): in a checkout
the cells bind only the package folders a rank imports (pkb_env/layout.py `IN_CELLS`), and where the package is
installed whole (a wheel), this folder is covered by an empty mount in every cell. Read them with
`pkb_env.solutions.read(...)`, never by importing them.
"""
from importlib import resources

__all__ = ["read", "names"]


def read(kind: str, name: str) -> str:
    """The source of `kind`/`name` (kind "experts" or "examples", name without ".py")."""
    return _folder(kind).joinpath(f"{name}.py").read_text()


def names(kind: str) -> list[str]:
    """The solutions of `kind` present, sorted (file names without ".py")."""
    return sorted(entry.name[:-3] for entry in _folder(kind).iterdir() if entry.name.endswith(".py"))


def _folder(kind: str):
    if kind not in ("experts", "examples"):
        raise ValueError(f"solutions are 'experts' or 'examples', not {kind!r}")
    return resources.files(__name__).joinpath(kind)
