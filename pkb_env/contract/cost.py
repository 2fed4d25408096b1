"""The cost model: what a task must move, compute and read at least, and the bound that follows.

A task's `cost(c)` returns a `Cost`: communication terms (a collective or pattern, nccl-tests' S in bytes,
the mesh dimension it runs over, the dependent rounds it needs), FLOPs by kind, and HBM bytes per rank.
Each term describes what the MATH requires, not how the reference does it: ring attention's W-1 p2p
steps are one algorithm; the bound is that the busiest rank must receive the other ranks' keys and
values, in one round if it asks for them all at once.

With peaks (per-rank one-way link bandwidth B, latency alpha, FLOP/s per dtype and kind, HBM bytes/s):
    T_comm    = sum over terms of  alpha * steps + bus_bytes / B     (bus_bytes = S * bus factor below)
    T_compute = sum over terms of  flops / rate(kind, dtype)
    T_memory  = hbm_bytes / HBM bandwidth
    bound     = max(T_comm, T_compute, T_memory)     (perfect overlap: what fused kernels aim at)
    serial    = T_comm + T_compute + T_memory        (no overlap), and the dominant term is named.
Because busbw = bus_bytes / t, busbw / B is the fraction of the bandwidth term reached (nccl-tests'
doc/PERFORMANCE.md argument); every bus factor lives in COLLECTIVES and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from pkb_env.record import Bound, CommTerm, ComputeTerm


@dataclass(frozen=True)
class Collective:
    """nccl-tests' definition of S for a collective, and its bus factor at n ranks."""

    size: str                                   # what S is, in words (for docs and the prompt)
    bus_factor: Callable[[int], float]


COLLECTIVES: Mapping[str, Collective] = {
    "all_reduce": Collective("bytes of the buffer on each rank", lambda n: 2 * (n - 1) / n),
    "reduce_scatter": Collective("input bytes per rank (n output blocks)", lambda n: (n - 1) / n),
    "all_gather": Collective("output bytes per rank (n input blocks)", lambda n: (n - 1) / n),
    "all_to_all": Collective("send-buffer bytes per rank, own block included", lambda n: (n - 1) / n),
    "all_to_allv": Collective("max over ranks of bytes sent to or received from other ranks", lambda n: 1.0),
    "broadcast": Collective("bytes of the buffer", lambda n: 1.0),
    "reduce": Collective("bytes of the buffer", lambda n: 1.0),
    "gather": Collective("the root's receive-buffer bytes (n blocks)", lambda n: (n - 1) / n),
    "scatter": Collective("the root's send-buffer bytes (n blocks)", lambda n: (n - 1) / n),
    "sendrecv": Collective("bytes the busiest rank sends (or receives) to peers", lambda n: 1.0),
}
"""nccl-tests doc/PERFORMANCE.md (all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n;
broadcast, reduce, sendrecv 1); gather and scatter as their perf tests count them: the root moves n-1 of
its n blocks. `all_to_allv` (ragged) takes S as the busiest rank's bytes to or from others, factor 1."""

COMPUTE_KINDS = ("matmul", "vector")
TENSOR_CORE_DTYPES = frozenset({"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float64"})
"""Dtypes whose matmuls run on tensor cores at the datasheet's dense rate. float32 matmuls do not: torch
keeps TF32 off by default, and fp32 tolerances reject TF32's 2^-11 rounding anyway. float64 matmuls do
(contract v3): cuBLAS's DGEMM uses Hopper's DMMA tensor-core instructions, 67 TFLOP/s on H100/H200 against
34 for fp64 FMA on CUDA cores; each dtype's rate is its own topology entry, so fp64 work is costed at the
fp64 peak, never bf16's (configs/topologies/*.yaml)."""


@dataclass(frozen=True)
class Comm:
    """`collective` over the mesh dimension `group` (or a tuple of them: the group of ranks sharing every
    other coordinate) with nccl-tests' S = `size_bytes`, in `steps` rounds. `why`: where the term is one of
    several schedules chosen by size (the cheaper at these dims), why this one: the prompt shows it, so that
    a bound naming another collective at another preset or world size is no puzzle."""

    collective: str
    size_bytes: float
    group: str | tuple[str, ...] = "world"
    steps: int = 1
    why: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.group, (tuple, list)):
            object.__setattr__(self, "group", ",".join(self.group))
        if self.collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.collective!r}; the cost table knows "
                             f"{', '.join(COLLECTIVES)}")
        if self.size_bytes < 0 or self.steps < 0:
            raise ValueError(f"Comm({self.collective!r}): size_bytes and steps must be non-negative")


@dataclass(frozen=True)
class Compute:
    """`flops` floating-point operations of `kind` per rank (a multiply-add counts 2)."""

    flops: float
    kind: str = "matmul"

    def __post_init__(self) -> None:
        if self.kind not in COMPUTE_KINDS:
            raise ValueError(f"Compute kind must be one of {COMPUTE_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Cost:
    """A task's cost at one size, per rank (the busiest rank where ranks differ)."""

    comm: tuple[Comm, ...] = ()
    compute: tuple[Compute, ...] = ()
    memory_bytes: float = 0.0


@dataclass(frozen=True)
class CostModel:
    """A Cost with its terms resolved against the mesh: group sizes, bus bytes, tensor-core use."""

    comm: tuple[CommTerm, ...]
    compute: tuple[ComputeTerm, ...]
    hbm_bytes: float
    dtype: str

    @classmethod
    def of(cls, cost: Cost, group_sizes: Mapping[str, int], dtype: str) -> "CostModel":
        terms = []
        for c in cost.comm:
            n = group_size(c.group, group_sizes)
            factor = COLLECTIVES[c.collective].bus_factor(n) if n > 1 else 0.0
            terms.append(CommTerm(c.collective, c.group, n, int(c.size_bytes), int(round(c.size_bytes * factor)),
                                  c.steps if n > 1 else 0, c.why))
        compute = tuple(ComputeTerm(k.flops, k.kind, k.kind == "matmul" and dtype in TENSOR_CORE_DTYPES)
                        for k in cost.compute)
        return cls(tuple(terms), compute, float(cost.memory_bytes), dtype)

    @property
    def size_bytes(self) -> int:
        return sum(t.size_bytes for t in self.comm if t.ranks > 1)

    @property
    def bus_bytes(self) -> int:
        return sum(t.bus_bytes for t in self.comm)


def group_size(group: str, group_sizes: Mapping[str, int]) -> int:
    """Ranks in a group over `group`: one mesh dimension ("tp") or several ("dp,ep": the product)."""
    n = 1
    for name in group.split(","):
        if name not in group_sizes:
            raise ValueError(f"Comm over {group!r}: the task's mesh has no dimension {name!r} "
                             f"(it has {', '.join(group_sizes)})")
        n *= group_sizes[name]
    return n


@dataclass(frozen=True)
class Peaks:
    """Per-rank peaks: from a topology's datasheet, or measured on the machine (see pkb_env/topology.py)."""

    source: str                                              # "datasheet" | "calibrated"
    link_gbps: float | None = None                           # per rank, one way
    alpha_s: float | None = None
    matmul_tflops: Mapping[str, float] = field(default_factory=dict)   # per dtype name
    vector_tflops: Mapping[str, float] = field(default_factory=dict)
    hbm_gbps: float | None = None

    def rate(self, kind: str, dtype: str) -> float | None:
        """FLOP/s for `kind` in `dtype`; vector work falls back to the matmul rate, an upper bound on it."""
        tflops = self.matmul_tflops.get(dtype) if kind == "matmul" else \
            self.vector_tflops.get(dtype, self.matmul_tflops.get(dtype))
        return tflops * 1e12 if tflops else None


def bound(model: CostModel, peaks: Peaks) -> Bound:
    """The lower bound of `model` at `peaks`; terms without a peak are left out (and listed as missing)."""
    missing = []
    comm_s = 0.0
    if any(t.bus_bytes or t.steps for t in model.comm):
        if peaks.link_gbps:
            comm_s = sum((peaks.alpha_s or 0.0) * t.steps + t.bus_bytes / (peaks.link_gbps * 1e9)
                         for t in model.comm)
        else:
            missing.append("communication (no link bandwidth)")
    compute_s, rates = 0.0, {}
    for term in model.compute:
        rate = peaks.rate(term.kind, model.dtype)
        if rate is None:
            missing.append(f"{term.kind} compute (no {model.dtype} rate)")
            continue
        compute_s += term.flops / rate
        rates[term.kind] = rate / 1e12
    memory_s = 0.0
    if model.hbm_bytes:
        if peaks.hbm_gbps:
            memory_s = model.hbm_bytes / (peaks.hbm_gbps * 1e9)
        else:
            missing.append("memory (no HBM bandwidth)")
    times = {"communication": comm_s, "compute": compute_s, "memory": memory_s}
    dominant = max(times, key=times.get)
    return Bound(source=peaks.source, comm_s=comm_s, compute_s=compute_s, memory_s=memory_s,
                 bound_s=times[dominant], serial_s=sum(times.values()), dominant=dominant,
                 bandwidth_gbps=peaks.link_gbps, alpha_s=peaks.alpha_s, hbm_gbps=peaks.hbm_gbps,
                 compute_tflops=rates, missing=missing)


def describe_model(model: CostModel) -> list[str]:
    """The terms in words, one per line: what must move, compute and be read, per rank."""
    lines = []
    for t in model.comm:
        if t.ranks < 2:
            lines.append(f"{t.collective} over {t.group}: a group of 1 rank, nothing to move")
            continue
        why = f"; {t.why}" if t.why else ""
        lines.append(f"{t.collective} over {t.group} ({t.ranks} ranks): S = {_bytes(t.size_bytes)} "
                     f"({COLLECTIVES[t.collective].size}), bus bytes {_bytes(t.bus_bytes)}, "
                     f"{t.steps} latency step{'s' if t.steps != 1 else ''}{why}")
    for c in model.compute:
        cores = "tensor cores" if c.tensor_cores else "no tensor cores" if c.kind == "matmul" else "CUDA cores"
        lines.append(f"{c.kind}: {c.flops / 1e9:.4g} GFLOP ({cores} in {model.dtype})")
    if model.hbm_bytes:
        lines.append(f"memory: {_bytes(model.hbm_bytes)} read and written")
    return lines


def describe_bound(b: Bound) -> str:
    parts = [f"comm {_time(b.comm_s)}", f"compute {_time(b.compute_s)}", f"memory {_time(b.memory_s)}"]
    text = (f"{b.source} peaks: {', '.join(parts)} -> bound {_time(b.bound_s)} ({b.dominant}-bound); "
            f"serial sum {_time(b.serial_s)}")
    if b.missing:
        text += f"; not counted: {', '.join(b.missing)}"
    return text


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
