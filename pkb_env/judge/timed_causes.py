"""What set the failing timed calls apart, when timed calls fail after the trials passed (issue 42).

A bug that only some data reaches (an expert no token picks, a rank with no rows, a tie, the step number) can
pass every trial and fail in timed calls, whose inputs are drawn afresh call by call. The timed check used to
answer every such failure with a guess at caching or replaying (verdict.TIMED_WRONG), pointing the agent away
from the cause. The judge holds every rank's seeds of every timed call (judge/seeds.py), so it redraws what
describes a call's data and costs little: the declared edge case the call holds and the rank it lands on
(contract/edges.py), the call's lengths and scalars (where the ranks draw on the CPU, as the judge does), and
each routing's expert loads (drawn on the CPU wherever ranks run: contract/routing.py). A property every failing
call held and no passing call did is named; so is a scalar whose values in the failing calls all lie beyond
those of the passing ones. Where nothing tells them apart, `explain` says nothing and the verdict keeps the
caching hint.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pkb_env.contract import derive_seed
from pkb_env.contract.edges import describe, edge_of, holder
from pkb_env.contract.inputs import call_env, draw_scalar
from pkb_env.contract.io import Scalar
from pkb_env.contract.mesh import SHARED
from pkb_env.contract.routing import draw_call, group_seed
from pkb_env.judge.context import StepContext
from pkb_env.judge.fingerprints import timed_label
from pkb_env.judge.timing import BurstLog

MAX_EXAMINED = 64  # failing calls, and passing calls, whose data is redrawn (evenly spaced where there are more)
MAX_NAMED = 2      # properties named in the feedback


@dataclass
class CallData:
    """What one timed call's inputs held: `kinds` (a property's key -> how this call held it) and `numbers` (a
    scalar's value, where every rank holds the same)."""

    label: str
    kinds: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, float] = field(default_factory=dict)


def explain(ctx: StepContext, log: BurstLog, failed: Sequence[set[int]]) -> str | None:
    """The data the failing timed calls held and the passing ones did not, in a sentence; None where no such
    property is found (or every call failed: then nothing is left to compare them with).
    `failed[b]`: the calls of burst b whose outputs differed on some rank."""
    calls = [(b, i) for b, burst in enumerate(log.bursts) for i in range(burst.calls)]
    bad = [c for c in calls if c[1] in failed[c[0]]]
    good = [c for c in calls if c[1] not in failed[c[0]]]
    if not bad or not good:
        return None
    bad_data = [call_data(ctx, log, b, i) for b, i in _spaced(bad)]
    good_data = [call_data(ctx, log, b, i) for b, i in _spaced(good)]
    kinds = _kinds(bad_data, good_data)
    found = (kinds + _beyond(bad_data, good_data, kinds))[:MAX_NAMED]
    if not found:
        return None
    others = len(bad) - 1
    head = bad_data[0].label + " failed" + (f", and {others} other timed call{'s' * (others > 1)}" if others else "")
    theirs = ", as did theirs" if others else ""
    sampled = "" if (len(bad_data), len(good_data)) == (len(bad), len(good)) else \
        f" (of those examined: {len(bad_data)} failing, {len(good_data)} passing)"
    return (f"{head}: its inputs held {'; and '.join(found)}{theirs}; the {len(good)} timed calls without "
            f"{'it' if len(found) == 1 else 'them'} passed{sampled}")


def call_data(ctx: StepContext, log: BurstLog, burst: int, call: int) -> CallData:
    """Call `call` of burst `burst`, redrawn from every rank's seeds for it (as ranks/bursts.make_sets derives
    them); its lengths and scalars only where the ranks draw on the CPU (on a GPU's generator they differ)."""
    task, layout, world = ctx.task, ctx.seeds.layout, ctx.world_size
    seeds = [{scope: derive_seed(seed, "call", call) for scope, seed in log.seeds[burst][rank].items()}
             for rank in range(world)]
    data = CallData(timed_label(burst, call))
    shared = seeds[0][SHARED]
    edge = edge_of(shared, task.edges) if task.edges else None
    if edge is not None:
        text = f"the declared edge case '{edge.name}' ({describe(edge, shared, layout)})"
        data.kinds[f"edge {edge.name}"] = text
        if not edge.everywhere:
            data.kinds[f"edge {edge.name} on rank {holder(shared, world)}"] = text
    envs = None
    if ctx.workload.rng == "cpu":
        contexts = [task.input_context(rank, world, ctx.preset, ctx.dtype, "cpu", seeds[rank])
                    for rank in range(world)]
        envs = [call_env(c, task.lengths, task.edges) for c in contexts]
        for length in task.lengths:
            empty = [str(rank) for rank, env in enumerate(envs) if env[length.name] == 0]
            if empty:
                doc = f" ({length.doc})" if length.doc else ""
                data.kinds[f"{length.name} = 0"] = f"{length.name} = 0 on rank{'s' * (len(empty) > 1)} " \
                                                   f"{', '.join(empty)}{doc}"
        for decl in task.inputs:
            if isinstance(decl, Scalar):
                values = {draw_scalar(decl, c, env, edge) for c, env in zip(contexts, envs)}
                if len(values) == 1:
                    (value,) = values
                    data.numbers[decl.name] = value
                    if isinstance(value, int):
                        data.kinds[f"{decl.name} = {value}"] = f"{decl.name} = {value}"
    elif not task.lengths:
        envs = [dict(task.input_context(rank, world, ctx.preset, ctx.dtype, "cpu", seeds[rank]).env)
                for rank in range(world)]
    if envs is not None:
        _routings(ctx, seeds, envs, data)
    return data


def _routings(ctx: StepContext, seeds: list[dict[str, int]], envs: list[dict[str, float]], data: CallData) -> None:
    """Per routing, the experts no token picked in the call, and the ranks all of whose experts none did."""
    layout = ctx.seeds.layout
    for routing in ctx.task.routings:
        scope = routing.scope(layout)
        idle_experts, idle_ranks = [], []
        for ranks in layout.groups(layout.group_key(routing.group)):
            first = ranks[0]
            drawn = draw_call(routing, group_seed(seeds[first], scope, layout, first), envs[first], layout)
            load = sum(drawn.expert_counts(member) for member in range(drawn.ranks))
            idle_experts += (load == 0).nonzero().flatten().tolist()
            idle_ranks += [ranks[g] for g, n in enumerate(load.view(drawn.ranks, -1).sum(1).tolist()) if n == 0]
        if idle_experts:
            idle = sorted(set(idle_experts))
            data.kinds[f"empty expert {routing.name}"] = (
                f"a routing that left experts without tokens (routing {routing.name}: expert{'s' * (len(idle) > 1)} "
                f"{', '.join(map(str, idle))} received none)")
        if idle_ranks:
            data.kinds[f"idle rank {routing.name}"] = (
                f"a routing that left a rank's experts without tokens (routing {routing.name}: rank"
                f"{'s' * (len(idle_ranks) > 1)} {', '.join(map(str, sorted(idle_ranks)))})")


def _kinds(bad: list[CallData], good: list[CallData]) -> list[str]:
    """Properties every failing call held and no passing call did, as the first failing call held them (an edge
    case on one rank only where the edge case alone does not tell the calls apart)."""
    common = set.intersection(*(set(d.kinds) for d in bad)) - set().union(*(set(d.kinds) for d in good))
    named = []
    for key, text in bad[0].kinds.items():
        coarse = key.split(" on rank ")[0] if key.startswith("edge ") else None
        if key in common and not (coarse != key and coarse in common) and text not in named:
            named.append(text)
    return named


def _beyond(bad: list[CallData], good: list[CallData], kinds: list[str]) -> list[str]:
    """Scalars whose failing values all lie below (or above) every passing value, unless `kinds` names the
    value already. Two failing calls at least: one call alone is the smallest or largest of n + 1 by chance
    2 / (n + 1)."""
    if len(bad) < 2:
        return []
    named = []
    for name, value in bad[0].numbers.items():
        if not all(name in d.numbers for d in (*bad, *good)) or any(k.startswith(f"{name} = ") for k in kinds):
            continue
        failing, passing = [d.numbers[name] for d in bad], [d.numbers[name] for d in good]
        if max(failing) < min(passing) or min(failing) > max(passing):
            side = "smaller" if max(failing) < min(passing) else "larger"
            named.append(f"{name} = {value:g} (every failing call's {name} {side} than every passing call's: "
                         f"{min(passing):g} to {max(passing):g})")
    return named


def _spaced(calls: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """At most MAX_EXAMINED of `calls`, evenly spaced, the first always among them."""
    step = max(1, -(-len(calls) // MAX_EXAMINED))
    return calls[::step]

