"""A timed burst, as a rank runs it: K calls back to back between a judge-released start and an end.

    make K input sets (outside the window)     every set fresh content from seeds of its own
    flush the cache, arm the clock             GPU: the device gate and the start event behind it
    report "gated", wait for the release       the judge stores the epoch once every rank has reported
    start; call 1 .. K; a mark every J calls   the host queues calls only now: a host slower than the
                                               device shows as device idle time, inside the burst
    snapshot the last output, stop, finish     the last output copied in stream order right after its call

Outputs are held (not copied) until the judge asks for their fingerprints after the burst; the last
call's output is snapshotted in stream order before the end, so work deferred past the end of a call
(to the next call that never comes, to a side stream, to a thread) leaves it incomplete. Every output
of the burst is alive when the burst ends, so two calls returning the same memory (a cache, a replay, a
reused buffer) are found by address. Nothing here knows whether it runs a candidate or the reference.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from pkb_env.contract import derive_seed
from pkb_env.ranks.clocks import BurstTimes
from pkb_env.ranks.outputs import check_size, export, reuse_problems, stage, updated
from pkb_env.ranks.fingerprints import fingerprint_calls
from pkb_env.ranks.tripwire import JUDGE, watch


@dataclass
class Workload:
    """What a burst calls, and how one input set is made from this rank's seeds for one call.

    `inplace`: the arguments the task updates in place (input name -> position), whose final values are
    results; `check`: refuses an output that may not travel (too large, beyond a declared bound)."""

    call: Callable[..., Any]
    make: Callable[[Any], tuple]
    inplace: dict[str, int] = field(default_factory=dict)
    check: Callable[[Any], None] = check_size


@dataclass
class HeldBurst:
    """The outputs and inputs of the last burst, kept until the judge has their fingerprints.

    `last` is the last call's output as it was right after the call (a copy in stream order); the checks
    that look at every output (size, memory returned twice) run when the judge asks for fingerprints,
    not before the burst's report, which must reach the judge as soon as the burst ends.
    """

    outputs: list[Any]
    inputs: list[tuple]
    last: Any
    workload: Workload
    last_inputs: tuple | None = None  # the last call's inputs, its in-place results copied in stream order
    bound: bool = False               # the reference's replay: its fingerprints carry the comparison's bound terms


def make_sets(workload: Workload, base: dict[str, int], calls: int, into: list[tuple] | None = None) -> list[tuple]:
    """The input sets of a burst's `calls` calls, each from its own seeds, derived one-way from the burst's
    base seeds (one per scope this rank belongs to, sent by the judge): call i's seed of a scope is the same
    on every rank of the scope and on the reference's replay, and known to no other rank.

    `into`: the previous burst's sets, whose tensors are refilled in place (one fresh set made at a time),
    so that call i of every burst reads the same addresses with new content: a cache keyed on an input's
    address hits for certain and returns a stale answer, where fresh allocations would only often reuse
    addresses (tests/adversarial, cache_data_ptr)."""
    sets = []
    for i in range(calls):
        fresh = workload.make({scope: derive_seed(seed, "call", i) for scope, seed in base.items()})
        sets.append(_refill(into[i], fresh) if into is not None and i < len(into) else fresh)
    return sets


def _refill(old: tuple, fresh: tuple) -> tuple:
    """`fresh`'s values in `old`'s tensors where they are the same kind of buffer (shape, dtype, device,
    not a view, no autograd), else the fresh argument itself."""
    if len(old) != len(fresh):
        return fresh
    return tuple(o.copy_(f) if _same_buffer(o, f) else f for o, f in zip(old, fresh))


def _same_buffer(old: Any, fresh: Any) -> bool:
    return (isinstance(old, torch.Tensor) and isinstance(fresh, torch.Tensor) and old.shape == fresh.shape
            and old.dtype == fresh.dtype and old.device == fresh.device and old._base is None
            and fresh._base is None and not old.requires_grad and not fresh.requires_grad
            and old.is_contiguous() and fresh.is_contiguous())


def timed_burst(workload: Workload, sets: list[tuple], clock, epoch: int, marks_every: int, capture_every: bool,
                deadline: float, gated: Callable[[], None]) -> tuple[HeldBurst, BurstTimes]:
    """Run len(sets) calls as one burst (see the module docstring); the held outputs and the times.

    `capture_every`: snapshot every output in stream order right after its call (for a solution that
    returned the same memory twice in its trials: a caller would have to copy each result out before
    the next call, and so does the judge, inside the timed window).
    """
    count = len(sets)
    clock.flush()
    clock.arm(epoch, count // marks_every)
    gated()
    seen_at = clock.page.wait(epoch, deadline, clock.pause_s)
    clock.start(seen_at)
    call, mark, outputs = workload.call, clock.mark, [None] * count
    issued = JUDGE.clock()
    if capture_every:
        for i in range(count):
            outputs[i] = stage(call(*sets[i]))
            if (i + 1) % marks_every == 0:
                mark()
    else:
        for i in range(count):
            outputs[i] = call(*sets[i])
            if (i + 1) % marks_every == 0:
                mark()
    host_s = JUDGE.clock() - issued
    last = stage(outputs[-1])  # in stream order, right after the last call
    last_inputs = _with_updated(sets[-1], workload) if workload.inplace and count else None
    clock.stop()
    times = clock.finish()
    times.seen_at, times.host_s = seen_at, host_s
    return HeldBurst(outputs, sets, last, workload, last_inputs), times


def _with_updated(args: tuple, workload: Workload) -> tuple:
    """`args` with its in-place results replaced by copies made now, in stream order: an update deferred past
    the end of the last call (to a side stream, a thread) is missing from them, as from `last`."""
    results = updated(args, workload.inplace)
    return tuple(results.get(name, arg) for name, arg in zip(_names(args, workload.inplace), args))


def _names(args: tuple, inplace: dict[str, int]) -> list[str | None]:
    at = {index: name for name, index in inplace.items()}
    return [at.get(i) for i in range(len(args))]


def fingerprints(held: HeldBurst, seed: int, rules: dict[str, list], sample: list[int],
                 bound: bool = False) -> dict[str, Any]:
    """The payload the judge compares: fingerprints of outputs and inputs, problems, sampled outputs in full.

    `rules`: the step's comparison checks (fingerprints.fingerprint_calls); `bound`: the reference's side.
    """
    for out in held.outputs:
        held.workload.check(out)
    problems = reuse_problems(held.outputs, held.inputs)  # while every output is alive
    outputs = [*held.outputs[:-1], held.last]
    inputs = held.inputs if held.last_inputs is None else [*held.inputs[:-1], held.last_inputs]
    return {"outputs": fingerprint_calls(outputs, seed, rules, bound),
            "inputs": fingerprint_calls(inputs, seed + 1, rules, bound, root="argument", strict=False),
            "problems": [[call, message] for call, message in problems],
            "samples": {str(i): export(outputs[i]) for i in sample if 0 <= i < len(outputs)}}

watch(sys.modules[__name__], "make_sets", "timed_burst", "fingerprints")
