"""Secret seeds for one evaluation, handed out rank by rank.

A fresh secret per step (from the OS's CSPRNG) is hashed with the purpose, the index and a scope; a rank
receives the seeds of the scopes it belongs to (its own, the shared one, and for a mesh one per group of
mesh dims, see pkb_env/contract/mesh.py), never the secret, so it cannot reproduce a peer's inputs, the
next trial's inputs, or the inputs of timed calls the judge will check.

A task's edge cases (pkb_env/contract/edges.py) follow from a call's shared seed. For the trials the
judge picks the seeds: every declared case once, and one trial plain (a step has at least one trial more
than the task has cases: `trial_count`), at positions shuffled by the secret, by trying seed indices until
the shared seed names the case wanted. So a step's trials always reach every edge case, and their order
tells a rank nothing. Trials a task's clauses add in another dtype (a rounding only a 16-bit dtype does:
contract/clauses.py) come last and are plain.
"""
from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field

from pkb_env.contract import MeshLayout, derive_seed, rank_seeds
from pkb_env.contract.edges import Edge, describe, edge_of
from pkb_env.contract.mesh import SHARED

TRIAL = "trial"


def trial_count(configured: int, edges: tuple[Edge, ...]) -> int:
    """A step's trials in its own dtype: the configured number (JudgeConfig.trials), or one more than the
    task's edge cases where it declares more, so that every case is in every step and one trial is plain."""
    return max(configured, len(edges) + 1)


@dataclass(frozen=True)
class SeedPlan:
    layout: MeshLayout               # the task's mesh at this world size (TaskSpec.layout)
    secret: int = field(default_factory=lambda: secrets.randbits(62))

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    def per_rank(self, purpose: str, indices: range | list[int]) -> list[list[dict[str, int]]]:
        """seeds[rank][k] = rank's seeds (scope -> seed) for call k of `purpose`."""
        return self._seeds([(purpose, i) for i in indices])

    def trials(self, count: int, edges: tuple[Edge, ...], plain: int = 0,
               ) -> tuple[list[list[dict[str, int]]], list[str]]:
        """The seeds of a step's `count` trials (seeds[rank][k]) and their labels for the feedback ("trial 1
        (an all-zero block in rank 2's x)"); the last `plain` of them are plain draws. The same on every call:
        a pure function of the secret."""
        cases = self._cases(count - plain, edges) + [None] * plain
        keys = [(TRIAL, k, self._attempt(k, case, edges)) for k, case in enumerate(cases)]
        labels = []
        for k, key in enumerate(keys):
            shared = derive_seed(self.secret, *key, SHARED)
            edge = edge_of(shared, edges)
            labels.append(f"trial {k}" + (f" ({describe(edge, shared, self.layout)})" if edge else ""))
        return self._seeds(keys), labels

    def _cases(self, count: int, edges: tuple[Edge, ...]) -> list[int | None]:
        """Which edge case (an index into the task's edges; None: plain) each trial is to be."""
        rng = random.Random(derive_seed(self.secret, "edge plan"))
        chosen = rng.sample(range(len(edges)), min(len(edges), max(count - 1, 0)))
        cases: list[int | None] = [*chosen, *[None] * (count - len(chosen))]
        rng.shuffle(cases)
        return cases

    def _attempt(self, k: int, case: int | None, edges: tuple[Edge, ...]) -> int:
        """The first seed index of trial k whose shared seed picks `case` (about 2 x len(edges) tries)."""
        want = None if case is None else edges[case]
        attempt = 0
        while edge_of(derive_seed(self.secret, TRIAL, k, attempt, SHARED), edges) is not want:
            attempt += 1
        return attempt

    def _seeds(self, keys: list[tuple]) -> list[list[dict[str, int]]]:
        return [[rank_seeds(self.secret, self.layout, rank, *key) for key in keys] for rank in range(self.world_size)]
