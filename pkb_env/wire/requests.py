"""What the judge asks a rank: one typed request per operation, as strict on the rank's side as answers are
on the judge's (messages.py).

Every request is a frozen dataclass that checks its own fields when it is made (in the judge) and again
when it is read back from a frame (in the rank, `parse`): exactly these keys, of these types, in range.
The judge is trusted, so a request out of schema is a bug, and the rank answers it with an error rather
than guess; what matters is that no operation's options travel as a loose dict that one layer adds a key
to and another forgets (the old `capture_every` and `rules` went through four layers that way).

    judge                                    rank (ranks/server.py)
    Start(phase)                          -> started | ready {facts}
    Load(task, source, pkb)               -> built {seconds}
    Trials(workload, seeds, dtypes)       -> trial {...} + outputs, one per seed
    Burst(workload, seeds, calls, ...)    -> gated, then burst {times}
    Fingerprints(burst, seed, rules, ...) -> fingerprints + payload
    Replay(workload, seeds, calls, ...)   -> gated, then burst {times} (reference ranks; Fingerprints next)
    Copies(bytes)                         -> copies {table}

A rank set's ranks are never asked to exit: they end with their cell (sandbox/cell.py).

A workload names what a request's calls run: the loaded solution on a task's inputs (`TaskWorkload`), a
bare collective (`CollectiveWorkload`, the calibration's), or a probe of the machine's peaks
(`ProbeWorkload`, ranks/probes.py).
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Union

MAX_SEEDS = 4096        # calls of one trials request
MAX_SCOPES = 64         # seed scopes of one rank (its own, the shared one, one per group of mesh dims)
MAX_RULES = 256         # output paths with a comparison rule
MAX_SOURCE_CHARS = 1 << 20

Seeds = dict[str, int]                      # a rank's seeds for one call: scope -> seed (contract/inputs.py)
Rule = tuple[float, float, Union[bool, str]]  # how a path is fingerprinted: atol, rtol, and the order of its rows
                                              # (False: as returned; True: a set; a path: in its ids' order)
Rules = dict[str, Rule]


class RequestError(ValueError):
    """A request out of schema: a bug in the judge (the rank answers it with an error)."""


# -- workloads -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskWorkload:
    """The loaded solution (candidate or reference) on the task's inputs at a size and dtype. `rng`: where
    inputs are drawn, "device" (the ranks' GPUs, fast) or "cpu" (identical wherever a rank runs: emulated
    ranks are checked against a reference on CPU ranks)."""

    task: str
    preset: str
    dtype: str
    rng: str

    def __post_init__(self) -> None:
        _require(self.rng in ("cpu", "device"), f"rng must be 'cpu' or 'device', got {self.rng!r}")


@dataclass(frozen=True)
class CollectiveWorkload:
    """One collective on one buffer of `bytes`, nccl-tests' way (the calibration's latency and bus bandwidth)."""

    collective: str
    bytes: int

    def __post_init__(self) -> None:
        _require(self.collective == "all_reduce", f"no calibration collective {self.collective!r}")
        _require(self.bytes >= 1, f"bytes must be positive, got {self.bytes}")


@dataclass(frozen=True)
class ProbeWorkload:
    """A probe of one of the machine's peaks (ranks/probes.py): sendrecv of `bytes`, a matmul of n x n in
    `dtype` on rank 0, or a device copy of `bytes` on rank 0."""

    probe: str
    bytes: int = 0
    dtype: str = ""
    n: int = 0

    def __post_init__(self) -> None:
        _require(self.probe in ("sendrecv", "matmul", "copy"), f"no probe {self.probe!r}")
        _require(self.n >= 1 if self.probe == "matmul" else self.bytes >= 1, f"a {self.probe} probe needs a size")


Workload = Union[TaskWorkload, CollectiveWorkload, ProbeWorkload]
WORKLOADS: dict[str, type] = {"task": TaskWorkload, "collective": CollectiveWorkload, "probe": ProbeWorkload}


def workload_message(workload: Workload) -> dict[str, Any]:
    kind = next(k for k, cls in WORKLOADS.items() if isinstance(workload, cls))
    return {"kind": kind, **dataclasses.asdict(workload)}


def parse_workload(message: Any) -> Workload:
    _require(isinstance(message, dict) and message.get("kind") in WORKLOADS, f"a workload of no known kind: "
                                                                            f"{str(message)[:80]}")
    fields = {k: v for k, v in message.items() if k != "kind"}
    return from_fields(WORKLOADS[message["kind"]], fields)


# -- requests ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """A request to the ranks; `label` names the phase in failure messages ("rank 1 raised during build")."""

    op: ClassVar[str] = ""
    label: ClassVar[str] = ""

    def message(self) -> dict[str, Any]:
        """The frame's JSON header (the rank set adds the nonce)."""
        body = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            body[f.name] = workload_message(value) if f.name == "workload" else _plain(value)
        return {"op": self.op, "label": self.label, **body}


@dataclass(frozen=True)
class Start(Request):
    """Run the phases of the rank's start up to `phase` (messages.START_PHASES) that have not run."""

    op: ClassVar[str] = "start"
    label: ClassVar[str] = "start-up"
    phase: str


@dataclass(frozen=True)
class Load(Request):
    """Load the task (and build its process groups, before any candidate code); then the candidate's module
    from `source`, or the task's reference where `source` is None. `pkb`: the source is a PKB-format file (PKB's
    signature, outputs and `utils.*` helpers), called through the task's PKB adapter (pkb_env/compat/)."""

    op: ClassVar[str] = "load"
    label: ClassVar[str] = "build"
    task: str
    source: str | None = None
    pkb: bool = False

    def __post_init__(self) -> None:
        _require(self.source is None or len(self.source) <= MAX_SOURCE_CHARS, "a source over the size limit")
        _require(not (self.pkb and self.source is None), "a PKB-format load needs a candidate's source")


@dataclass(frozen=True)
class Trials(Request):
    """One untimed call per entry of `seeds` (this rank's seeds for each call), outputs sent back whole.
    `dtypes`: one per call where a call runs in another dtype than the workload's (a task's rule that only a
    16-bit dtype exercises: contract/clauses.py); empty: every call in the workload's."""

    op: ClassVar[str] = "trials"
    label: ClassVar[str] = "trials"
    workload: Workload
    seeds: tuple[Seeds, ...]
    dtypes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require(1 <= len(self.seeds) <= MAX_SEEDS, f"trials take 1 to {MAX_SEEDS} seeds, got {len(self.seeds)}")
        for seeds in self.seeds:
            _check_seeds(seeds)
        _require(not self.dtypes or (isinstance(self.workload, TaskWorkload) and len(self.dtypes) == len(self.seeds)
                                     and all(type(d) is str and d for d in self.dtypes)),
                 "dtypes: one dtype name per seed, for a task workload only")

    def workload_of(self, index: int) -> Workload:
        """The workload call `index` runs."""
        return dataclasses.replace(self.workload, dtype=self.dtypes[index]) if self.dtypes else self.workload


@dataclass(frozen=True)
class Burst(Request):
    """`calls` calls back to back behind the start gate of `epoch` (ranks/bursts.py), a mark every
    `marks_every` calls. `seeds`: this rank's base seeds of the burst (each call's derive from them).
    `capture_every`: copy every output in stream order as its call returns (a solution that returned the
    same memory twice in its trials: a caller would have to, so the judge does, inside the timed window)."""

    op: ClassVar[str] = "burst"
    label: ClassVar[str] = "timing"
    workload: Workload
    seeds: Seeds
    calls: int
    epoch: int
    marks_every: int
    capture_every: bool = False

    def __post_init__(self) -> None:
        _check_seeds(self.seeds)
        _require(self.calls >= 1 and self.marks_every >= 1 and self.epoch >= 1, "calls, marks_every and epoch "
                                                                                "must be positive")


@dataclass(frozen=True)
class Fingerprints(Request):
    """Fingerprints of the last burst's outputs and inputs with a seed drawn after it, and the outputs of the
    calls in `sample` in full. `rules`: how each output path is compared (atol, rtol, rows form a set)."""

    op: ClassVar[str] = "fingerprints"
    label: ClassVar[str] = "timed-output check"
    burst: int
    seed: int
    rules: Rules
    sample: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_rules(self.rules)


@dataclass(frozen=True)
class Replay(Request):
    """The reference's side of a candidate's burst: the same calls on the same inputs, timed as a burst behind
    the gate of `epoch` (its time is the reference's half of the step's paired speedup: docs/timing.md). Its
    outputs are held for `Fingerprints`, which the reference answers with the comparison's bound terms too."""

    op: ClassVar[str] = "replay"
    label: ClassVar[str] = "timed-output check"
    workload: Workload
    seeds: Seeds
    calls: int
    epoch: int
    marks_every: int

    def __post_init__(self) -> None:
        _check_seeds(self.seeds)
        _require(self.calls >= 1, "calls must be positive")


@dataclass(frozen=True)
class Copies(Request):
    """Copy-engine rates between every ordered pair of GPUs, measured by a rank asked for `bytes` > 0."""

    op: ClassVar[str] = "copies"
    label: ClassVar[str] = "calibration"
    bytes: int = 0


REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (Start, Load, Trials, Burst, Fingerprints, Replay,
                                                              Copies)}


def parse(message: Any) -> tuple[Request, str]:
    """The request a frame carries and its nonce; RequestError for anything out of schema."""
    _require(isinstance(message, dict), "a request that is not an object")
    cls = REQUESTS.get(message.get("op"))
    _require(cls is not None, f"an operation of no known kind: {str(message.get('op'))[:40]!r}")
    _require(message.get("label") == cls.label, f"a {cls.op!r} request labelled {str(message.get('label'))[:40]!r}")
    nonce = message.get("nonce", "")
    _require(type(nonce) is str, "a nonce that is not a string")
    fields = {k: v for k, v in message.items() if k not in ("op", "label", "nonce", "payload")}
    if "workload" in fields:
        fields["workload"] = parse_workload(fields["workload"])
    return from_fields(cls, fields), nonce


# -- checks ----------------------------------------------------------------------------------------------
def from_fields(cls: type, fields: dict[str, Any]) -> Any:
    """`cls` made from a frame's `fields`, each as its annotation says (services.py reads its requests so too)."""
    names = {f.name for f in dataclasses.fields(cls)}
    _require(set(fields) <= names and all(f.name in fields or f.default is not dataclasses.MISSING
                                           for f in dataclasses.fields(cls)),
             f"a {cls.__name__} with keys {sorted(fields)}; it takes {sorted(names)}")
    hints = typing.get_type_hints(cls)
    values = {name: _typed(hints[name], value, f"{cls.__name__}.{name}") for name, value in fields.items()}
    try:
        return cls(**values)
    except TypeError as exc:
        raise RequestError(f"{cls.__name__}: {exc}") from None


def _typed(hint: Any, value: Any, where: str) -> Any:
    """`value` (as JSON gave it) as `hint` says, or RequestError: tuples from lists, exact scalar types."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options:
            try:
                return _typed(option, value, where)
            except RequestError:
                continue
        raise RequestError(f"{where}: {str(value)[:60]!r} is none of {options}")
    if origin is tuple:
        _require(isinstance(value, (list, tuple)), f"{where}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], v, where) for v in value)
        _require(len(value) == len(args), f"{where}: expected {len(args)} items")
        return tuple(_typed(a, v, where) for a, v in zip(args, value))
    if origin is dict:
        _require(isinstance(value, dict), f"{where}: expected an object")
        return {_typed(args[0], k, where): _typed(args[1], v, where) for k, v in value.items()}
    if hint is float:
        _require(type(value) in (int, float) and math.isfinite(value), f"{where}: expected a finite number")
        return float(value)
    if dataclasses.is_dataclass(hint):
        _require(isinstance(value, hint), f"{where}: expected a {hint.__name__}")
        return value
    _require(type(value) is hint, f"{where}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__}")
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _check_seeds(seeds: Seeds) -> None:
    _require(isinstance(seeds, dict) and 1 <= len(seeds) <= MAX_SCOPES and
             all(type(k) is str and type(v) is int and v >= 0 for k, v in seeds.items()),
             f"seeds must map 1 to {MAX_SCOPES} scopes to non-negative integers")


def _check_rules(rules: Rules) -> None:
    _require(isinstance(rules, dict) and len(rules) <= MAX_RULES, f"at most {MAX_RULES} rules")
    for path, (atol, rtol, order) in rules.items():
        _require(type(path) is str and atol >= 0 and rtol >= 0 and type(order) in (bool, str),
                 f"rule {path!r}: atol and rtol must be >= 0 and the order a bool or the path of the ids")


def _require(condition: bool, problem: str) -> None:
    if not condition:
        raise RequestError(problem)
