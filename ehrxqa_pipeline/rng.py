"""Per-step random generators.

Every random step draws from its own generator seeded by (global seed, step name), so adding draws to one
step never changes what another step samples (the published builders share one stream; see
docs/deviations.md).
"""

from __future__ import annotations

import hashlib

import numpy as np


def step_seed(seed: int, step: str) -> int:
    digest = hashlib.sha256(f"{seed}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def generator(seed: int, step: str) -> np.random.Generator:
    """A numpy Generator for one named step; same (seed, step) gives the same stream on every machine."""
    return np.random.Generator(np.random.PCG64(step_seed(seed, step)))
