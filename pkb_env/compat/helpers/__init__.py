"""PKB's `utils.*` helpers for solutions, as thin shims over pkb_env.runtime, importable as `utils` in a rank that
judges a PKB-format file (`--pkb`) and nowhere else (docs/pkb_compat.md, "PKB's helpers").

PKB's solution files import `from utils.cuda_helpers import compile_cuda_extension` (381 of the 383 files of its
published corpus), `utils.parallelkittens_runtime` (the ParallelKittens ones) and `utils.triton_utils`. `install()`
puts a finder on the rank's `sys.meta_path` that answers exactly these names, each with a fresh module holding
only the helper's public names (no `__file__`, nothing of pkb_env beside the functions themselves); any other
`utils.X` (PKB's harness: input makers, comparisons) is not found, with a message saying which helpers exist.
The finder goes in before the candidate's module runs, in the rank's own process, which ends with the step.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

PACKAGE = "utils"
HELPERS = {"cuda_helpers": ("compile_cuda_extension",),
           "triton_utils": ("get_tid", "get_ntid", "get_flat_tid", "get_flat_bid", "sync_threads", "send_signal",
                            "wait_signal", "blockwise_barrier"),
           "parallelkittens_runtime": ("get_or_create_parallel_tensor", "create_parallel_tensor",
                                       "get_or_create_barrier", "NUM_DEVICES", "BARRIER_ELEMS")}


class HelperFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `utils` and `utils.<helper>` (HELPERS) for a PKB-format candidate; nothing else."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        head, _, name = fullname.partition(".")
        if head != PACKAGE:
            return None
        if name not in HELPERS:
            raise ModuleNotFoundError(f"No module named {fullname!r}: pkb-env provides PKB's helpers for solutions "
                                      f"only ({', '.join(f'utils.{h}' for h in HELPERS)}); PKB's harness modules "
                                      f"are not part of a candidate's world", name=fullname)
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        if spec.name == PACKAGE:
            module.__path__ = []
            module.__doc__ = "PKB's helpers for solutions, provided by pkb-env: " + ", ".join(HELPERS)
            return module
        name = spec.name.partition(".")[2]
        if spec.name.partition(".")[0] != PACKAGE or name not in HELPERS:
            raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)
        source = importlib.import_module(f"{__name__}.{name}")   # ImportError with its reason (Triton missing)
        module.__doc__ = source.__doc__
        for attribute in HELPERS[name]:
            setattr(module, attribute, getattr(source, attribute))
        return module

    def exec_module(self, module):
        pass


def install() -> None:
    """Make `utils.<helper>` importable in this process (a rank judging a PKB-format file)."""
    if not any(isinstance(f, HelperFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, HelperFinder())
