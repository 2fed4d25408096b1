"""Secret seeds for one evaluation, handed out rank by rank.

A fresh secret per step (from the OS's CSPRNG) is hashed with the purpose, the index and a scope; a rank
receives the seeds of the scopes it belongs to (its own, the shared one, and for a task with a mesh one
per group of mesh dims, see pkb_env/contract/mesh.py), never the secret, so it cannot reproduce a peer's
inputs, the next trial's inputs, or the inputs of timed calls the judge will check.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from pkb_env.contract import MeshLayout, rank_seeds


@dataclass(frozen=True)
class SeedPlan:
    layout: MeshLayout               # the task's mesh at this world size (TaskSpec.layout)
    secret: int = field(default_factory=lambda: secrets.randbits(62))

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    def per_rank(self, purpose: str, indices: range | list[int]) -> list[list[dict[str, int]]]:
        """seeds[rank][k] = rank's seeds (scope -> seed) for call k of `purpose`."""
        return [[rank_seeds(self.secret, self.layout, rank, purpose, i) for i in indices]
                for rank in range(self.world_size)]
