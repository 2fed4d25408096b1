"""TaskSpec: one task declared as data, and what the judge, the prompt and the tests derive from it.

A task folder `tasks/<name>/` holds `reference.py` (shown to the agent verbatim; `solution(...)` in
torch.distributed, also what the judge runs to produce expected outputs and the baseline time) and
`spec.py` defining `SPEC = TaskSpec(...)`. docs/task_contract.md is the guide for writing one.

Everything else is derived: the input maker (inputs.py), the prompt's input/output/cost sections
(pkb_env/prompt.py), the comparison rules per output, the world sizes the shapes allow, the cost model
at any size, the golden test's checks (every task, no list).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from pkb_env.contract import results
from pkb_env.contract.clauses import Clause, extra_dtypes
from pkb_env.contract.cost import Cost, CostModel
from pkb_env.contract.expr import ExprError, Size, as_expr
from pkb_env.contract.edges import Edge
from pkb_env.contract.families import FAMILIES
from pkb_env.contract.inputs import InputContext, RankSeeds, make_inputs, reads, size_env
from pkb_env.contract.io import DTYPES, Group, Input, Length, Output, PerRank, Replicated, Scalar, Tensor, mesh_dims
from pkb_env.contract.mesh import FLAT, Mesh, MeshError, MeshLayout
from pkb_env.contract.pkb import Pkb
from pkb_env.contract.routing import Routed, Routing, realised_load
from pkb_env.contract.sized import CostContext, World
from pkb_env.contract.tolerance import EXACT, Check, Rule, Tolerance

# The most a rank may return from one call: ranks/outputs.py refuses more before copying it anywhere,
# and a task whose outputs exceed it at a size cannot run there (output_problem).
MAX_OUTPUT_BYTES = 256 << 20

# The most floating-point work per rank and call that a reference on CPU ranks is asked to do: each trial must
# finish within the judge's trial timeout (30 s) on shared cores. Every task's bench preset is under 2.1e9 at
# world sizes 2-8 except MAGI-1's (2.3e13 at W = 2), which only GPUs can judge.
CPU_REFERENCE_FLOPS = 5e10


class TaskError(ValueError):
    """A task name, preset, dtype or world size that the suite cannot serve; the message says the fix."""


@dataclass(frozen=True)
class Preset:
    """A named problem size. `tiny` runs on CPU ranks in milliseconds; `bench` is PKB's size; `large` where
    a bandwidth-bound regime needs it."""

    dims: Mapping[str, int]
    dtype: str
    note: str = ""


@dataclass(frozen=True)
class WorldSizes:
    """Limits on the world size beyond what the shapes and the mesh already imply, with the reason.

    `splits` are sizes the ranks share out evenly although no declared shape shows it (the B*S tokens
    of vocabulary-sharded logits that the reference redistributes by token): W must divide each.
    """

    minimum: int = 1
    maximum: int | None = None
    multiple_of: int = 1
    reason: str = ""
    splits: tuple[Size, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "splits", tuple(as_expr(s) for s in self.splits))

    def problem(self, world_size: int) -> str | None:
        why = f" ({self.reason})" if self.reason else ""
        if world_size < self.minimum:
            return f"needs at least {self.minimum} ranks{why}"
        if self.maximum is not None and world_size > self.maximum:
            return f"takes at most {self.maximum} ranks{why}"
        if world_size % self.multiple_of:
            return f"needs a multiple of {self.multiple_of} ranks{why}"
        return None

    def split_problem(self, world_size: int, env: Mapping[str, float]) -> str | None:
        """Which of `splits` the ranks cannot share evenly at these sizes, or None."""
        for size in self.splits:
            value = size.integer(env)
            if value % world_size:
                why = f" ({self.reason})" if self.reason else ""
                return f"{size} = {value} does not split evenly over {world_size} ranks{why}"
        return None


Golden = Callable[[list[dict[str, Any]], "World"], list[Any]]


@dataclass(frozen=True)
class TaskSpec:
    """Everything the judge and the prompt need about one task (see docs/task_contract.md)."""

    name: str
    title: str
    description: str
    family: str                       # a key of contract.families.FAMILIES
    pkb_id: int | None
    origin: str                       # the codebase the pattern comes from
    inputs: tuple[Input, ...]         # one per positional parameter of the reference's solution, in order
    outputs: tuple[Output, ...]
    golden: Golden                    # golden(inputs per rank as {name: value}, world) -> outputs per rank
    cost: Callable[["CostContext"], Cost]
    tolerance_rule: Rule
    presets: Mapping[str, Preset]
    dtypes: tuple[str, ...]           # task dtypes the user may pick; the preset's is the default
    parallelism: str = ""
    mesh: Mesh = FLAT
    lengths: tuple[Length, ...] = ()  # sizes drawn per call that input shapes may name (ragged dims)
    edges: tuple[Edge, ...] = ()      # edge cases the statement defines, drawn into one call in two (edges.py)
    clauses: tuple[Clause, ...] = ()  # the statement's rules and how every step's trials reach them (clauses.py)
    routings: tuple[Routing, ...] = ()  # top-k routings drawn jointly over a group, per call (routing.py)
    world_sizes: WorldSizes = field(default_factory=WorldSizes)
    departures: tuple[str, ...] = ()  # how and why this task departs from PKB's problem
    returns: str = "auto"             # "auto" (one output: the tensor; several: a tuple) | "tuple" | "dict"
    collectives_allowed: bool = True
    reference_path: Path | None = None
    pkb: Pkb | None = None            # PKB's call and outputs mapped onto this task's (contract/pkb.py): load_task
                                      # reads it from the spec module's `PKB`

    def __post_init__(self) -> None:
        where = f"task {self.name!r}"
        if self.family not in FAMILIES:
            raise TaskError(f"{where}: family {self.family!r} is not one of {', '.join(FAMILIES)}")
        names = [d.name for d in (*self.inputs, *self.lengths, *self.routings)]
        if len(set(names)) != len(names) or len({o.name for o in self.outputs}) != len(self.outputs):
            raise TaskError(f"{where}: input, length and output names must be unique (a routing's name counts as "
                            f"an input's)")
        if not self.outputs:
            raise TaskError(f"{where}: declare at least one output")
        if self.returns not in ("auto", "tuple", "dict"):
            raise TaskError(f"{where}: returns must be 'auto', 'tuple' or 'dict'")
        if self.returns != "auto" and all(o.inplace for o in self.outputs):
            raise TaskError(f"{where}: returns={self.returns!r} but every output is an InPlace input; leave "
                            f"returns='auto' (the function returns None)")
        try:
            object.__setattr__(self, "outputs", results.resolve_inplace(self.inputs, self.outputs, where))
        except ValueError as exc:
            raise TaskError(str(exc)) from None
        if not {"tiny", "bench"} <= set(self.presets):
            raise TaskError(f"{where}: needs presets 'tiny' and 'bench', has {sorted(self.presets)}")
        for dtype in self.dtypes:
            if dtype not in DTYPES or not DTYPES[dtype].is_floating_point:
                raise TaskError(f"{where}: task dtype {dtype!r} must be a floating dtype name")
        for preset_name, preset in self.presets.items():
            if preset.dtype not in self.dtypes:
                raise TaskError(f"{where}: preset {preset_name} uses dtype {preset.dtype} outside {self.dtypes}")
            clash = set(preset.dims) & (set(self.mesh.names) | {"W"} | {n.name for n in self.lengths})
            if clash:
                raise TaskError(f"{where}: preset {preset_name} dims {sorted(clash)} clash with W, mesh or "
                                f"length names")
            missing = self.mesh.preset_names - set(preset.dims)
            if missing:
                raise TaskError(f"{where}: the mesh {self.mesh.describe()} names {', '.join(sorted(missing))}, "
                                f"which preset {preset_name} does not define")
        scalars = {d.name for d in self.inputs if isinstance(d, Scalar)}
        try:
            results.check_outputs(self.outputs, scalars, self.mesh.names, {n.name for n in self.lengths},
                                  self.dtypes, where)
        except ValueError as exc:
            raise TaskError(str(exc)) from None
        for decl in (*self.inputs, *self.outputs, *self.lengths):
            placement = getattr(decl, "layout", None)
            dims = list(decl.dims) if isinstance(decl, Group) else list(mesh_dims(getattr(placement, "over", None)))
            for dim in dims:
                if dim not in self.mesh.names:
                    raise TaskError(f"{where}: {decl.name} refers to mesh dimension {dim!r}; the mesh has "
                                    f"{', '.join(self.mesh.names)}")
        self._check_reads(where)
        self._check_routings(where)
        tensors = ({d.name for d in self.inputs if isinstance(d, Scalar)
                    or isinstance(d, Tensor) and not isinstance(d.dist, Routed)}
                   | {n.name for n in self.lengths} | {r.name for r in self.routings})
        if len({e.name for e in self.edges}) != len(self.edges):
            raise TaskError(f"{where}: edge case names must be unique")
        for edge in self.edges:
            for name in edge.rewrites:
                if name not in tensors:
                    raise TaskError(f"{where}: edge case {edge.name!r} rewrites {name!r}, which is not a tensor or "
                                    f"scalar input, a length or a routing (a routing's fields follow from its "
                                    f"logits: rewrite the routing)")
        self._check_clauses(where)

    def _check_clauses(self, where: str) -> None:
        """Clause names unique; each names an edge case the task declares and dtypes it takes."""
        if len({c.name for c in self.clauses}) != len(self.clauses):
            raise TaskError(f"{where}: clause names must be unique")
        edges = {e.name for e in self.edges}
        for clause in self.clauses:
            if clause.edge and clause.edge not in edges:
                raise TaskError(f"{where}: clause {clause.name!r} is drawn by edge case {clause.edge!r}, which the "
                                f"task does not declare (edges: {sorted(edges)})")
            outside = [d for d in clause.dtypes if d not in self.dtypes]
            if outside:
                raise TaskError(f"{where}: clause {clause.name!r} needs dtypes {outside} the task does not take "
                                f"({list(self.dtypes)})")

    def _check_reads(self, where: str) -> None:
        """An input that reads others (FromInputs, Custom with reads) reads tensor inputs that read nothing
        themselves and vary over no mesh dim its own values do not (otherwise two ranks holding one replica
        of it would make different values, or a rank would need a value it does not hold)."""
        plain = {d.name: d for d in self.inputs if isinstance(d, Tensor) and not reads(d)}
        for decl in self.inputs:
            for name in reads(decl):
                if name not in plain:
                    raise TaskError(f"{where}: input {decl.name} reads {name!r}, which is not another tensor "
                                    f"input made without reading others")
                extra = set(self._scope(plain[name])) - set(self._scope(decl))
                if extra:
                    raise TaskError(f"{where}: input {decl.name} reads {name}, which varies over "
                                    f"{', '.join(sorted(extra))} while {decl.name} does not; give {decl.name} "
                                    f"a layout that varies over {', '.join(sorted(extra))} too")

    def _check_routings(self, where: str) -> None:
        """A routing spans mesh dims the mesh has; a Routed input names a declared routing, and is this
        rank's own (PerRank over every dim): its group's routing differs by member."""
        routings = {r.name: r for r in self.routings}
        for routing in self.routings:
            for dim in (routing.group,) if isinstance(routing.group, str) else routing.group:
                if dim not in self.mesh.names:
                    raise TaskError(f"{where}: routing {routing.name} spans mesh dimension {dim!r}; the mesh has "
                                    f"{', '.join(self.mesh.names)}")
        for decl in self.inputs:
            if isinstance(decl, Tensor) and isinstance(decl.dist, Routed):
                if decl.dist.routing not in routings:
                    raise TaskError(f"{where}: input {decl.name} takes {decl.dist.field} of routing "
                                    f"{decl.dist.routing!r}, which the task does not declare (routings=)")
                if not isinstance(decl.layout, PerRank) or mesh_dims(decl.layout.over) not in ((), self.mesh.names):
                    raise TaskError(f"{where}: input {decl.name} is a rank's part of a routing: declare it "
                                    f"PerRank() (different on every rank)")

    def _scope(self, decl: Tensor) -> tuple[str, ...]:
        """The mesh dims a tensor input's values vary over (its seed scope), without resolving sizes."""
        if isinstance(decl.layout, Replicated):
            return ()
        return mesh_dims(decl.layout.over) or self.mesh.names

    # -- sizes and world sizes ------------------------------------------------------------------------
    @property
    def parameters(self) -> list[str]:
        return [d.name for d in self.inputs]

    @property
    def group_dims(self) -> tuple:
        """The spans (a mesh dim, or a tuple of them) whose process groups the judge must build: those a
        Group input asks for."""
        return tuple(dict.fromkeys(d.dim for d in self.inputs if isinstance(d, Group)))

    @property
    def reference_source(self) -> str:
        assert self.reference_path is not None, "TaskSpec.reference_path is set by pkb_env.task.load_task"
        return self.reference_path.read_text()

    def preset(self, name: str | Preset) -> Preset:
        if isinstance(name, Preset):
            return name
        if name not in self.presets:
            raise TaskError(f"task {self.name!r} has no preset {name!r}; choose one of {sorted(self.presets)}")
        return self.presets[name]

    def resolve_dtype(self, preset: str, dtype: str | None) -> str:
        chosen = dtype or self.preset(preset).dtype
        if chosen not in self.dtypes:
            raise TaskError(f"task {self.name!r} does not take dtype {chosen!r}; choose one of {list(self.dtypes)}")
        return chosen

    def layout(self, world_size: int, dims: Mapping[str, int] | None = None) -> MeshLayout:
        """The mesh at `world_size`; `dims` (the preset's) are needed where a mesh size names one."""
        try:
            return self.mesh.resolve(world_size, dims)
        except MeshError as exc:
            raise TaskError(f"task {self.name!r} cannot run at world size {world_size}: {exc}") from None

    def layouts(self, world_size: int) -> list[MeshLayout]:
        """The distinct meshes of the task's presets at `world_size` (one where the mesh depends on W only;
        presets whose mesh does not factor at this size left out): the judge builds the groups of each at
        load, before any candidate code runs."""
        found: dict[MeshLayout, None] = {}
        for preset in self.presets.values():
            try:
                found.setdefault(self.mesh.resolve(world_size, preset.dims), None)
            except MeshError:
                continue
        return list(found)

    def env(self, dims: Mapping[str, int], world_size: int, lengths: str = "low") -> dict[str, float]:
        """The sizes expressions may name: the preset's dims, W, the mesh's dimensions, and every Length at
        its smallest (`lengths="low"`, what static uses see) or largest (`"high"`) value."""
        env = size_env(dims, world_size, self.layout(world_size, dims))
        for length in self.lengths:
            env[length.name] = length.low.integer(env) if lengths == "low" else length.high.integer(env) - 1
        return env

    def world_size_problem(self, world_size: int, preset: str | Preset) -> str | None:
        """Why the task cannot run at `world_size` with `preset`, or None."""
        problem = self.world_sizes.problem(world_size)
        if problem:
            return problem
        try:
            layout = self.mesh.resolve(world_size, self.preset(preset).dims)
        except MeshError as exc:
            return str(exc)
        try:
            env = self.env(self.preset(preset).dims, world_size)
        except ExprError as exc:
            return f"a length's bounds: {exc}"
        problem = self.world_sizes.split_problem(world_size, env)
        if problem:
            return problem
        for routing in self.routings:
            try:
                routing.sizes(env, layout)
            except (ExprError, ValueError) as exc:
                return str(exc)
        for decl in (*self.inputs, *self.outputs):
            if isinstance(decl, (Tensor, Output)) and decl.shape is not None:
                try:
                    decl.local_shape(env, layout)
                except (ExprError, ValueError) as exc:
                    kind = "input" if isinstance(decl, Tensor) else "output"
                    return f"{kind} {decl.name}: {exc}"
        return None

    def output_problem(self, world_size: int, preset: str | Preset, dtype: str | None = None) -> str | None:
        """Why a rank's outputs at this size and dtype (default: the preset's) would exceed what the judge
        accepts from one call, or None. Asked before an episode (JudgeService.problem), not after a trial."""
        p = self.preset(preset)
        dtype = dtype or p.dtype
        env, layout = self.env(p.dims, world_size), self.layout(world_size, p.dims)
        high = self.env(p.dims, world_size, lengths="high")
        size = sum(math.prod(o.bound(high, layout) if o.shape is None else o.local_shape(env, layout))
                   * o.resolve_dtype(dtype).itemsize
                   for path, o in self.output_paths.items() if o.kind == "tensor" and not o.inplace)
        if size <= MAX_OUTPUT_BYTES:
            return None
        narrower = ", a 16-bit dtype" if DTYPES[dtype].itemsize > 2 else ""
        return (f"task {self.name!r} at world size {world_size} would return {size / 2**20:.0f} MiB per rank and "
                f"call in {dtype}, more than the judge accepts from one call ({MAX_OUTPUT_BYTES >> 20} MiB); use "
                f"more ranks{narrower} or a smaller preset")

    def cpu_reference_problem(self, world_size: int, preset: str | Preset, dtype: str | None = None) -> str | None:
        """Why the reference cannot be judged on CPU ranks at this size (None: it can). The cpu executor and
        cuda-emulated (whose trusted reference runs on CPU ranks) ask before an episode, not after a timeout."""
        p = self.preset(preset)
        flops = sum(term.flops for term in self.cost_model(p.dims, world_size, dtype or p.dtype).compute)
        if flops <= CPU_REFERENCE_FLOPS:
            return None
        name = preset if isinstance(preset, str) else "this preset"
        return (f"task {self.name!r} at preset {name!r}, world size {world_size}, does {flops:.2g} FLOPs per rank "
                f"and call, more than a reference on CPU ranks can do within a trial ({CPU_REFERENCE_FLOPS:.0g}); "
                f"judge it with executor 'cuda' (one GPU per rank) or pick a smaller preset such as 'tiny'")

    def check_world_size(self, world_size: int, preset: str | Preset) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise TaskError(f"world_size must be a positive integer, got {world_size!r}")
        problem = self.world_size_problem(world_size, preset)
        if problem:
            allowed = self.allowed_world_sizes(preset)
            raise TaskError(f"task {self.name!r} cannot run at world size {world_size}: {problem}; pick another "
                            f"world_size or preset (with this preset it takes {_list(allowed)})")

    def allowed_world_sizes(self, preset: str | Preset, candidates: Sequence[int] = range(1, 9)) -> list[int]:
        return [w for w in candidates if self.world_size_problem(w, preset) is None]

    # -- inputs ---------------------------------------------------------------------------------------
    def input_context(self, rank: int, world_size: int, preset: str | Preset, dtype: str,
                      device: torch.device | str, seeds: RankSeeds, rng_device: torch.device | str = "cpu",
                      groups: Mapping[str, Any] | None = None) -> InputContext:
        dims = dict(self.preset(preset).dims)
        return InputContext(rank, world_size, dims, dtype, torch.device(device), dict(seeds),
                            self.layout(world_size, dims), torch.device(rng_device), groups)

    def make_inputs(self, ctx: InputContext) -> tuple:
        return make_inputs(self.inputs, ctx, self.lengths, self.edges, self.routings)

    def trial_dtypes(self, dtype: str) -> tuple[str, ...]:
        """The dtypes of the trials a step in `dtype` adds for its clauses (a rule only a 16-bit dtype
        exercises gets a trial in that dtype; none where the step's dtype already does)."""
        return extra_dtypes(self.clauses, dtype)

    # -- outputs and tolerances -----------------------------------------------------------------------
    def tolerance(self, dtype: str, dims: Mapping[str, int], world_size: int,
                  output: str | Output | None = None) -> Tolerance:
        """The closeness a correct answer must reach for `output` (a name or a declaration; default: the
        task's rule at the task dtype); an output of another dtype than the task's (an fp32 loss) is rounded
        last in its own."""
        rule, output_dtype = self.tolerance_rule, None
        if output is not None:
            decl = output if isinstance(output, Output) else self._output(output)
            if decl.compare != "close":
                return EXACT
            rule, output_dtype = decl.tolerance or rule, decl.resolve_dtype(dtype)
        return rule(DTYPES[dtype], self.env(dims, world_size), output_dtype)

    @property
    def output_paths(self) -> dict[str, Output]:
        """Every compared path of a call (contract/results.py) and its declaration."""
        return results.paths(self.outputs, self._returns)

    def output_checks(self, dtype: str, dims: Mapping[str, int], world_size: int) -> dict[str, Check]:
        """How each output path is compared: its tolerance, the order of its rows, whether replicas agree."""
        table = self.output_paths
        paths = {decl.name: path for path, decl in table.items() if path.count("[") <= 1}
        checks = {}
        for path, out in table.items():
            if out.kind in ("dict", "none"):
                continue
            tol = self.tolerance(dtype, dims, world_size, out)
            key = paths[out.order_by] if out.order_by is not None else None
            checks[path] = Check(tol, unordered=out.compare == "unordered", order_by=key, identical=out.identical)
        return checks

    @property
    def inplace_positions(self) -> dict[str, int]:
        """Input name -> its position among the arguments, for every input updated in place."""
        index = {d.name: i for i, d in enumerate(self.inputs)}
        return {o.name: index[o.name] for o in self.outputs if o.inplace}

    def inplace_arguments(self) -> dict[str, str]:
        """Argument path (as the ranks' fingerprints name inputs) -> the path of its in-place result."""
        return {f"argument[{i}]": f"{results.UPDATED}[{name!r}]" for name, i in self.inplace_positions.items()}

    def output_path(self, index: int) -> str:
        """The path of `self.outputs[index]` (InPlace outputs: `updated['name']`)."""
        target = self.outputs[index]
        return next(path for path, decl in self.output_paths.items() if decl is target)

    @property
    def _returns(self) -> str:
        return results.returns_of(self.outputs, self.returns)

    def output_problems(self, out: Any, rank: int, args: Sequence[Any], dims: Mapping[str, int],
                        world_size: int, dtype: str) -> list[str]:
        """Where a rank's output departs from the declaration (structure, None-ness, kinds, shapes, bounds,
        dtypes); `args` are the call's arguments AFTER the call (the in-place results)."""
        values = dict(zip(self.parameters, args))
        updated = {o.name: values[o.name] for o in self.outputs if o.inplace}
        env = self.env(dims, world_size, lengths="high")  # shapes name no Length; bounds may, at their largest
        return results.problems(self.output_paths, out, updated, rank, values, dtype, env,
                                self.layout(world_size, dims), self._returns)

    def bound_problems(self, out: Any, dims: Mapping[str, int], world_size: int) -> list[str]:
        """Variable-length outputs beyond their declared bound (ranks/outputs checks this in the rank, before
        the output travels); bounds may name a Length, at its largest."""
        env, layout = self.env(dims, world_size, lengths="high"), self.layout(world_size, dims)
        return [problem for path, decl in self.output_paths.items() if decl.max_shape is not None
                for problem in results.bound_problem(path, decl, results.at(out, path), env, layout)]

    def _output(self, name: str) -> Output:
        for out in self.outputs:
            if out.name == name:
                return out
        raise TaskError(f"task {self.name!r} has no output {name!r}; outputs: {[o.name for o in self.outputs]}")

    # -- cost and golden ------------------------------------------------------------------------------
    def cost_model(self, dims: Mapping[str, int], world_size: int, dtype: str,
                   calls: Sequence[Sequence[Mapping[str, int]]] = ()) -> CostModel:
        """The cost at this size; `calls` (each: every rank's seeds for one call, as the judge handed them
        out) make the routings' loads the realised ones of those calls rather than the balanced bound."""
        ctx = self.cost_context(dims, world_size, dtype, calls)
        layout = ctx.layout
        return CostModel.of(self.cost(ctx), dict(zip(layout.names, layout.sizes)), dtype)

    def cost_context(self, dims: Mapping[str, int], world_size: int, dtype: str,
                     calls: Sequence[Sequence[Mapping[str, int]]] = ()) -> CostContext:
        """What the task's `cost` function reads at this size (contract/sized.py); `calls` as for cost_model."""
        sized, layout = self._sized(dims, world_size), self.layout(world_size, dims)
        loads = {r.name: realised_load(r, calls, sized[2], layout, self.edges) for r in self.routings} if calls \
            else {}
        return CostContext(*sized, dtype, layout, self.routings, loads)

    def world(self, dims: Mapping[str, int], world_size: int, dtype: str) -> World:
        """What the task's golden reads at this size (contract/sized.py)."""
        return World(*self._sized(dims, world_size), dtype, self.layout(world_size, dims))

    def _sized(self, dims: Mapping[str, int], world_size: int) -> tuple:
        """The leading fields of a CostContext or World: declarations, sizes, dims, world size."""
        return self.inputs, self.outputs, self.env(dims, world_size), dict(dims), world_size


def _list(values: Sequence[int]) -> str:
    return ", ".join(map(str, values)) if values else "no world size from 1 to 8"

