"""The step context: what one step judges, worked out once before any stage runs, read by every stage.

Before it existed the workload was rebuilt five times a step, the output checks three times, and the
comparison rules crossed four layers as loose dicts; now a stage gets everything it needs from one
frozen object and returns its own result (judge/pipeline.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from pkb_env.contract import Check, CostModel, derive_seed
from pkb_env.contract.spec import TaskSpec
from pkb_env.judge.replicas import replica_groups
from pkb_env.judge.seeds import SeedPlan, trial_count
from pkb_env.judge.timing import BurstLog
from pkb_env.wire.requests import Rules, Seeds, TaskWorkload

ROUTED_CALLS = 32  # the most timed calls whose routing the judge redraws for the cost model (StepContext.timed_cost)


@dataclass(frozen=True)
class StepContext:
    task: TaskSpec
    preset: str
    dtype: str
    world_size: int
    workload: TaskWorkload       # what every request of the step runs: the loaded solution on the task's inputs
    seeds: SeedPlan              # this step's secret, handed out rank by rank
    checks: dict[str, Check]     # how each output path is compared (the task's tolerance at this dtype and size)
    rules: Rules                 # the same checks as the ranks fingerprint with them
    replicas: dict[str, list[list[int]]]  # identical outputs: the ranks that must return the same bits
    cost: CostModel              # the task's cost model at this size, world size and dtype
    trial_dtypes: tuple[str, ...]  # per trial: the step's dtype, then any a task's clause adds (judge/seeds.py)
    other_checks: dict[str, dict[str, Check]]  # the checks of the trials in another dtype, by dtype
    deadline: float              # the step's hard end (time.monotonic()): JudgeConfig.step_budget_s

    @classmethod
    def make(cls, task: TaskSpec, preset: str, dtype: str, world_size: int, rng: str, trials: int,
             budget_s: float) -> "StepContext":
        """`rng`: where inputs are drawn ("device" where the reference's ranks are on GPUs too, else "cpu");
        `trials`: the configured number, raised to reach every edge case (seeds.trial_count), to which the
        task's clauses may add trials in another dtype."""
        dims = task.preset(preset).dims
        checks = task.output_checks(dtype, dims, world_size)
        extra = task.trial_dtypes(dtype)
        trial_dtypes = (dtype,) * trial_count(trials, task.edges) + extra
        rules = {path: (c.tolerance.atol, c.tolerance.rtol, c.order) for path, c in checks.items()
                 if path.startswith("output")}
        for argument, path in task.inplace_arguments().items():  # the ranks fingerprint them as arguments
            rules[argument] = (checks[path].tolerance.atol, checks[path].tolerance.rtol, False)
        return cls(task, preset, dtype, world_size, TaskWorkload(task.name, preset, dtype, rng),
                   SeedPlan(task.layout(world_size, dims)), checks, rules, replica_groups(task, world_size, dims),
                   task.cost_model(dims, world_size, dtype), trial_dtypes,
                   {d: task.output_checks(d, dims, world_size) for d in extra}, time.monotonic() + budget_s)

    def timed_cost(self, log: BurstLog) -> CostModel:
        """The cost model of the calls a timing log holds: where the task routes tokens (contract v3), the
        busiest rank's load realised in those calls (at most ROUTED_CALLS of them, evenly spaced), else
        `cost`. The judge holds every rank's seeds, so it redraws each call's routing as the ranks did."""
        if not self.task.routings:
            return self.cost
        calls = [[{scope: derive_seed(seed, "call", i) for scope, seed in seeds[rank].items()}
                  for rank in range(self.world_size)]
                 for seeds, burst in zip(log.seeds, log.bursts) for i in range(burst.calls)]
        if not calls:
            return self.cost
        step = max(1, -(-len(calls) // ROUTED_CALLS))
        return self.task.cost_model(self.task.preset(self.preset).dims, self.world_size, self.dtype, calls[::step])

    @property
    def trials(self) -> int:
        return len(self.trial_dtypes)

    @property
    def other_dtypes(self) -> tuple[str, ...]:
        """What a Trials request carries: every trial's dtype where one differs from the step's, else ()."""
        return self.trial_dtypes if set(self.trial_dtypes) != {self.dtype} else ()

    def trial_seeds(self) -> list[list[Seeds]]:
        """seeds[rank][k]: rank's seeds for trial k (the reference's and the candidate's are the same); the
        trials reach every edge case the task declares (judge/seeds.py)."""
        return self._plan()[0]

    @property
    def trial_labels(self) -> list[str]:
        """Per trial, what the feedback calls it: "trial 2", "trial 2 (an all-zero block in rank 1's x)", or
        "trial 3 (in bfloat16)"."""
        return [label if dtype == self.dtype else f"{label} (in {dtype})"
                for label, dtype in zip(self._plan()[1], self.trial_dtypes)]

    def trial_checks(self, k: int) -> dict[str, Check]:
        """How trial k's outputs are compared: at its own dtype's tolerance."""
        dtype = self.trial_dtypes[k]
        return self.checks if dtype == self.dtype else self.other_checks[dtype]

    def _plan(self) -> tuple[list[list[Seeds]], list[str]]:
        plain = sum(d != self.dtype for d in self.trial_dtypes)
        return self.seeds.trials(self.trials, self.task.edges, plain)
