"""Secret seeds for one evaluation, handed out rank by rank.

A fresh secret per step (from the OS's CSPRNG) is hashed with the purpose, the index and the rank; a
rank receives its own seeds and the shared ones, never the secret, so it cannot reproduce a peer's
inputs, the next trial's inputs, or the inputs of timed calls the judge will check.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from pkb_env.task import derive_seed


@dataclass(frozen=True)
class SeedPlan:
    world_size: int
    secret: int = field(default_factory=lambda: secrets.randbits(62))

    def per_rank(self, purpose: str, indices: range | list[int]) -> list[list[tuple[int, int]]]:
        """seeds[rank][k] = (rank's own seed, shared seed) for call k of `purpose`."""
        return [[(derive_seed(self.secret, purpose, i, rank), derive_seed(self.secret, purpose, i, "shared"))
                 for i in indices] for rank in range(self.world_size)]
