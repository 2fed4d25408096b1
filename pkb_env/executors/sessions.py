"""Sessions: a rank set seen through the operations the judge runs on it (executors/interface.py).

Each operation turns typed arguments into one wire request per rank (every rank gets only its own seeds:
wire/requests.py), waits with the config's deadline for that kind of request, and decodes what came
back (the rank set has already held every frame to its schema and the request's nonce). Payloads are
unpacked with weights_only loading (wire/channel.py); one that cannot be read is a forgery of the rank
that sent it (RankSetFailed with kind "forged"). Nothing here decides a count or believes a time: the
timing protocol (judge/timing.py) does both.
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Callable

from pkb_env.executors.interface import BurstRecord, RankBurst, TrialOutputs
from pkb_env.executors.rank_set import Delivery, RankSet, RankSetFailed
from pkb_env.record import RankFailure
from pkb_env.tracing import Tracer
from pkb_env.wire import channel
from pkb_env.wire.requests import Burst, Copies, Fingerprints, Load, Replay, Rules, Seeds, Trials, Workload


class Session:
    """Operations common to candidate and reference ranks. `before_timing` runs before every burst and
    `untimed` when the judge asks for the untimed work between bursts, their fingerprints (the executor's
    spares held and freed: executors/spares.py; no rank set may run a phase of its start beside a burst)."""

    def __init__(self, ranks: RankSet, before_timing: Callable[[], None], untimed: Callable[[], None],
                 tracer: Tracer):
        self.ranks = ranks
        self._before_timing = before_timing
        self._untimed = untimed
        self.tracer = tracer
        self._gate = f"gate {ranks.role}"   # the trace's name for a burst asked of these ranks (pkb_env/tracing.py)
        self.config = ranks.config

    @property
    def world_size(self) -> int:
        return self.ranks.world_size

    @property
    def memory_bytes(self) -> int:
        """The least memory of any rank (device memory on GPUs, else the address-space limit)."""
        return (min((f.get("memory_bytes") or 0) for f in self.ranks.facts)
                or self.ranks.placement.limits.address_space_bytes or (2 << 30))

    def trials(self, workload: Workload, seeds: list[list[Seeds]], dtypes: tuple[str, ...] = ()
               ) -> list[TrialOutputs]:
        count = len(seeds[0])
        with self.tracer.span("trials"):
            self.ranks.ask([Trials(workload, tuple(s), dtypes) for s in seeds])
            got = self.ranks.collect("trial", count, self._deadline(self.config.trial_timeout_s), Trials.label,
                                     limit=self._limit("trial_timeout_s"))
        results = []
        for k in range(count):
            per_rank = [got[r][k] for r in range(self.world_size)]
            payloads = [self._unpack(d, r, Trials.label) for r, d in enumerate(per_rank)]
            results.append(TrialOutputs(
                outputs=[p.get("output") for p in payloads],
                updated=[p.get("updated") for p in payloads],
                seconds=[d.header["seconds"] for d in per_rank],
                aliases=[d.header["aliases"] for d in per_rank],
                mutated=[d.header["mutated"] for d in per_rank],
                unchanged=[d.header["unchanged"] for d in per_rank],
                shares=[d.header["shares"] for d in per_rank],
                input_bytes=max(d.header["input_bytes"] for d in per_rank),
                output_bytes=max(d.header["output_bytes"] for d in per_rank)))
        return results

    def burst(self, workload: Workload, seeds: list[Seeds], calls: int, marks_every: int,
              capture_every: bool = False) -> BurstRecord:
        with self.tracer.span("burst"):
            return self._gated(lambda epoch: [Burst(workload, s, calls, epoch, marks_every, capture_every)
                                              for s in seeds], calls, marks_every, Burst.label)

    def _gated(self, requests: Callable[[int], list], calls: int, marks_every: int, label: str) -> BurstRecord:
        """Ask `requests(epoch)` of the ranks, release them at once behind the gate, read their burst reports."""
        self._before_timing()
        deadline = self._deadline(self.config.timing_timeout_s)
        epoch = self.ranks.page.next_epoch()
        with self.tracer.span(self._gate):   # ends with every rank at the gate: a sink sees the judge just before
            self.ranks.ask(requests(epoch))  # the release, the moment nothing but the burst may be about to run
            self.ranks.collect("gated", 1, deadline, label, limit=self._limit("timing_timeout_s"))
        released = self.ranks.release(epoch)
        got = self.ranks.collect("burst", 1, deadline, label, limit=self._limit("timing_timeout_s"))
        ranks = []
        for (d,) in got:
            h = d.header
            ranks.append(RankBurst(h["seen_at"], h["ended_at"], h["busy_s"], h["host_s"], h["idle_s"], h["marks"],
                                   d.received, h["wait_s"]))
        return BurstRecord(calls, marks_every, released, ranks)

    def fingerprints(self, burst: int, seed: int, rules: Rules, sample: list[int]) -> list[dict]:
        self.ask_fingerprints(burst, seed, rules, sample)
        return self.read_fingerprints()

    def ask_fingerprints(self, burst: int, seed: int, rules: Rules, sample: list[int]) -> None:
        """Ask for the last burst's fingerprints without waiting (`read_fingerprints` reads them), so that two rank sets
        fingerprint their halves of a pair at once."""
        self._untimed()
        self.ranks.ask(Fingerprints(burst, seed, rules, tuple(sample)))

    def read_fingerprints(self) -> list[dict]:
        """Per rank, the fingerprints asked for last."""
        with self.tracer.span("fingerprints"):
            got = self.ranks.collect("fingerprints", 1, self._deadline(self.config.timing_timeout_s),
                                     Fingerprints.label, limit=self._limit("timing_timeout_s"))
            return [self._unpack(d[0], r, Fingerprints.label) for r, d in enumerate(got)]

    def _deadline(self, seconds: float) -> float:
        return time.monotonic() + seconds

    def _limit(self, setting: str) -> str:
        """A deadline's setting in words, for a timeout's message: "trial_timeout_s = 30 s"."""
        return f"{setting} = {getattr(self.config, setting):g} s"

    def _unpack(self, delivery: Delivery, rank: int, label: str) -> dict:
        try:
            data = channel.unpack_tensors(delivery.payload)
        except Exception as exc:  # weights_only refusal, truncated data: a forged or broken payload
            raise self._forged(rank, label, f"a payload the judge could not read ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise self._forged(rank, label, "a payload that is not of the judge's form")
        return data

    def _forged(self, rank: int, label: str, what: str) -> RankSetFailed:
        failure = RankFailure(rank, "forged", f"rank {rank} sent {what} during {label}", label,
                              self.ranks.log_tail(rank))
        return RankSetFailed([failure])


class CandidateRanks(Session):
    """A candidate's fresh ranks for one step (executors/interface.py, CandidateSession)."""

    def __init__(self, ranks: RankSet, before_timing: Callable[[], None], untimed: Callable[[], None],
                 tracer: Tracer, end_timing: Callable[[RankSet], None],
                 freeze: Callable[[RankSet], AbstractContextManager[None]], containment: dict[str, str]):
        super().__init__(ranks, before_timing, untimed, tracer)
        self._end_timing = end_timing
        self._freeze = freeze
        self.containment = containment
        self.timing_ended = False   # else the executor's spares move on once the session is closed

    def load(self, task: str, source: str, pkb: bool = False) -> float:
        with self.tracer.span("load"):
            self.ranks.ask(Load(task, source, pkb))
            got = self.ranks.collect("built", 1, self._deadline(self.config.build_timeout_s), Load.label,
                                     limit=self._limit("build_timeout_s"))
        return max(d[0].header["seconds"] for d in got)

    def quiet(self, label: str) -> None:
        self.ranks.quiet(label)

    def frozen(self) -> AbstractContextManager[None]:
        return self._freeze(self.ranks)

    @property
    def contained(self) -> bool:
        return self.ranks.cell.contained

    def end_timing(self) -> None:
        self.timing_ended = True
        self._end_timing(self.ranks)


class ReferenceRanks(Session):
    """The trusted reference ranks (executors/interface.py, ReferenceSession)."""

    def replay(self, workload: Workload, seeds: list[Seeds], calls: int, marks_every: int) -> BurstRecord:
        """A candidate's burst on the same inputs, timed alike; its fingerprints (with the bound terms) next."""
        with self.tracer.span("replay"):
            return self._gated(lambda epoch: [Replay(workload, s, calls, epoch, marks_every) for s in seeds], calls,
                               marks_every, Replay.label)

    def copy_rates(self, size: int) -> list[list[float]]:
        self.ranks.ask([Copies(size if r == 0 else 0) for r in range(self.world_size)])
        got = self.ranks.collect("copies", 1, self._deadline(self.config.timing_timeout_s), Copies.label)
        return got[0][0].header["table"]

    def load(self, task: str | None) -> None:
        """The task's reference on every rank (once per task: the ranks keep it until another is loaded)."""
        if task is not None and self.ranks.loaded != task:
            self.ranks.loaded = None
            with self.tracer.span("load"):
                self.ranks.ask(Load(task, None))
                self.ranks.collect("built", 1, self._deadline(self.config.build_timeout_s), Load.label)
            self.ranks.loaded = task
