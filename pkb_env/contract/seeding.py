"""The one-way seed derivation every secret draw goes through (inputs, edge cases, fingerprints)."""
from __future__ import annotations

import hashlib


def derive_seed(secret: int, *parts: object) -> int:
    """A 63-bit seed from a secret and a purpose; one-way, so a rank holding its seed learns no other."""
    text = ":".join(str(p) for p in (secret, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1
