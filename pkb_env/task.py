"""The task contract: what a task folder under `tasks/` declares, and how the suite is loaded.

A task is a folder `tasks/<name>/` with two files:

* `reference.py` — shown to the agent verbatim. Defines `solution(...)` with torch.distributed calls on
  the default process group. It is also what the judge runs (in trusted rank processes) to produce the
  expected outputs and the baseline time, so the agent is judged against exactly the code it was shown.
* `spec.py` — defines `SPEC = TaskSpec(...)`: how inputs are made, which world sizes and dtypes the task
  takes, presets, tolerances with a reason, the traffic model used by the roofline, metadata, and a
  single-process `golden` implementation of the same math on full tensors (a test holds the distributed
  reference equal to it on every rank).

Inputs are always random and always made from seeds the judge derives per trial and per rank, so a rank
can reproduce only its own inputs (and the shared ones every rank receives), never a peer's: a candidate
that "communicates" by regenerating its peers' inputs locally has nothing to regenerate them from.
"""
from __future__ import annotations

import hashlib
import importlib
import pkgutil
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
}


class TaskError(ValueError):
    """A task name, preset, dtype or world size that the suite cannot serve; the message says the fix."""


@dataclass(frozen=True)
class Tolerance:
    """Element-wise closeness `|got - expected| <= atol + rtol * |expected|`, with the reason for the values."""

    atol: float
    rtol: float
    reason: str

    @property
    def exact(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0


EXACT = Tolerance(0.0, 0.0, "pure data movement: every element must arrive bit-exact")


@dataclass(frozen=True)
class Preset:
    """A named problem size. `tiny` runs on CPU ranks in milliseconds; `bench` is the GPU size."""

    dims: Mapping[str, int]
    dtype: str
    note: str = ""


@dataclass(frozen=True)
class Traffic:
    """Bytes that must cross the interconnect, in nccl-tests vocabulary (doc/PERFORMANCE.md there).

    `size_bytes` is nccl-tests' S for the collective (algbw = S / t); `bus_bytes` is what the busiest rank
    must move in one direction, S times the collective's bus factor (busbw = bus_bytes / t). With a
    per-GPU one-way bandwidth B the bandwidth floor is bus_bytes / B. `latency_steps` counts the
    unavoidable cross-rank synchronisations (one for every primitive here) that the alpha term charges.
    """

    collective: str
    size_bytes: int
    bus_bytes: int
    latency_steps: int = 1


@dataclass(frozen=True)
class WorldSizes:
    """Which world sizes a task takes. `divides` lists dims that must be divisible by the world size."""

    minimum: int = 1
    maximum: int | None = None
    divides: tuple[str, ...] = ()

    def problem(self, world_size: int, dims: Mapping[str, int]) -> str | None:
        if world_size < self.minimum:
            return f"needs at least {self.minimum} ranks"
        if self.maximum is not None and world_size > self.maximum:
            return f"takes at most {self.maximum} ranks"
        for d in self.divides:
            if dims[d] % world_size:
                return f"dimension {d}={dims[d]} is not divisible by world size {world_size}"
        return None


def derive_seed(secret: int, *parts: object) -> int:
    """A 63-bit seed from a secret and a purpose; one-way, so a rank holding its seed learns no other."""
    text = ":".join(str(p) for p in (secret, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


@dataclass(frozen=True)
class InputContext:
    """Everything a task's input maker may use. Random draws go through `randn`/`randint`/`generator`."""

    rank: int
    world_size: int
    preset: Preset
    dtype: torch.dtype
    device: torch.device
    seed: int
    shared_seed: int
    rng_device: torch.device = torch.device("cpu")  # where draws are made before moving to `device`

    @property
    def dims(self) -> Mapping[str, int]:
        return self.preset.dims

    def generator(self, shared: bool = False) -> torch.Generator:
        """A fresh generator: `shared=True` gives every rank the same stream (replicated data, roots).

        Draws are made on `rng_device`: the CPU for trials (so a CPU reference can check CUDA ranks, as
        the emulated executor does), the rank's own device for timing sets (fast, and only used where the
        reference runs on the same kind of device).
        """
        gen = torch.Generator(device=self.rng_device)
        gen.manual_seed(self.shared_seed if shared else self.seed)
        return gen

    def randn(self, *shape: int, shared: bool = False, dtype: torch.dtype | None = None,
              stream: int = 0) -> torch.Tensor:
        """Standard-normal values in the task dtype. `stream` separates several draws in one maker."""
        gen = self.generator(shared)
        if stream:
            gen.manual_seed(derive_seed(self.shared_seed if shared else self.seed, "stream", stream))
        out = torch.randn(*shape, generator=gen, device=self.rng_device, dtype=torch.float32)
        return out.to(device=self.device, dtype=dtype or self.dtype)

    def randint(self, low: int, high: int, *shape: int, shared: bool = False, stream: int = 0,
                dtype: torch.dtype = torch.int64) -> torch.Tensor:
        gen = self.generator(shared)
        if stream:
            gen.manual_seed(derive_seed(self.shared_seed if shared else self.seed, "stream", stream))
        return torch.randint(low, high, shape, generator=gen, device=self.rng_device, dtype=dtype).to(self.device)


Args = tuple
Outputs = Any  # a tensor, None, or tuples/lists/dicts of them


@dataclass(frozen=True)
class TaskSpec:
    """Everything the judge and the prompt need about one task, declared in `tasks/<name>/spec.py`."""

    name: str
    title: str
    description: str
    family: str
    parallelism: str
    origin: str
    pkb_id: int | None
    make_inputs: Callable[[InputContext], Args]
    golden: Callable[[Sequence[Args], int], list[Outputs]]
    traffic: Callable[[int, Mapping[str, int], int], Traffic]
    presets: Mapping[str, Preset]
    dtypes: tuple[str, ...]
    tolerances: Mapping[str, Tolerance]
    world_sizes: WorldSizes = field(default_factory=WorldSizes)
    inputs_doc: str = ""
    outputs_doc: str = ""
    collectives_allowed: bool = True
    reference_path: Path | None = None

    # -- derived -----------------------------------------------------------------------------
    @property
    def reference_source(self) -> str:
        assert self.reference_path is not None, "TaskSpec.reference_path is set by load_task"
        return self.reference_path.read_text()

    def preset(self, name: str) -> Preset:
        if name not in self.presets:
            raise TaskError(f"task {self.name!r} has no preset {name!r}; choose one of {sorted(self.presets)}")
        return self.presets[name]

    def resolve_dtype(self, preset: str, dtype: str | None) -> str:
        chosen = dtype or self.preset(preset).dtype
        if chosen not in self.dtypes:
            raise TaskError(f"task {self.name!r} does not take dtype {chosen!r}; choose one of {list(self.dtypes)}")
        return chosen

    def check_world_size(self, world_size: int, preset: str) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise TaskError(f"world_size must be a positive integer, got {world_size!r}")
        problem = self.world_sizes.problem(world_size, self.preset(preset).dims)
        if problem:
            raise TaskError(f"task {self.name!r} cannot run at world size {world_size}: {problem}; "
                            f"pick another world_size or preset")

    def tolerance(self, dtype: str) -> Tolerance:
        return self.tolerances.get(dtype, EXACT)

    def input_context(self, rank: int, world_size: int, preset: str, dtype: str, device: torch.device | str,
                      seed: int, shared_seed: int, rng_device: torch.device | str = "cpu") -> InputContext:
        return InputContext(rank, world_size, self.preset(preset), DTYPES[dtype], torch.device(device),
                            seed, shared_seed, torch.device(rng_device))


TASKS_PACKAGE = "pkb_env.tasks"


@lru_cache(maxsize=None)
def task_names() -> tuple[str, ...]:
    """Every task in the suite, in name order."""
    pkg = importlib.import_module(TASKS_PACKAGE)
    return tuple(sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.ispkg))


@lru_cache(maxsize=None)
def load_task(name: str) -> TaskSpec:
    """The TaskSpec of `tasks/<name>/`, with its reference path filled in."""
    if not isinstance(name, str) or name not in task_names():
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(task_names())} "
                        f"(`pkb-env tasks` lists them)")
    module = importlib.import_module(f"{TASKS_PACKAGE}.{name}.spec")
    spec: TaskSpec = module.SPEC
    ref = Path(module.__file__).with_name("reference.py")
    return replace(spec, reference_path=ref)


def load_reference(name: str) -> Callable[..., Outputs]:
    """The reference `solution` of a task (trusted code, imported only in judge-owned processes)."""
    return importlib.import_module(f"{TASKS_PACKAGE}.{name}.reference").solution
