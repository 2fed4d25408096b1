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
from pkb_env.judge.seeds import SeedPlan
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
    trials: int
    deadline: float              # the step's hard end (time.monotonic()): JudgeConfig.step_budget_s

    @classmethod
    def make(cls, task: TaskSpec, preset: str, dtype: str, world_size: int, rng: str, trials: int,
             budget_s: float) -> "StepContext":
        """`rng`: where inputs are drawn ("device" where the reference's ranks are on GPUs too, else "cpu")."""
        dims = task.preset(preset).dims
        checks = task.output_checks(dtype, dims, world_size)
        rules = {path: (c.tolerance.atol, c.tolerance.rtol, c.order) for path, c in checks.items()
                 if path.startswith("output")}
        for argument, path in task.inplace_arguments().items():  # the ranks fingerprint them as arguments
            rules[argument] = (checks[path].tolerance.atol, checks[path].tolerance.rtol, False)
        return cls(task, preset, dtype, world_size, TaskWorkload(task.name, preset, dtype, rng),
                   SeedPlan(task.layout(world_size, dims)), checks, rules, replica_groups(task, world_size, dims),
                   task.cost_model(dims, world_size, dtype),
                   trials, time.monotonic() + budget_s)

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

    def trial_seeds(self) -> list[list[Seeds]]:
        """seeds[rank][k]: rank's seeds for trial k (the reference's and the candidate's are the same); the
        trials reach every edge case the task declares (judge/seeds.py)."""
        return self.seeds.trials(self.trials, self.task.edges)[0]

    @property
    def trial_labels(self) -> list[str]:
        """Per trial, what the feedback calls it: "trial 2", or "trial 2 (an all-zero block in rank 1's x)"."""
        return self.seeds.trials(self.trials, self.task.edges)[1]
