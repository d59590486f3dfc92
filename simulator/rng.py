"""Named random streams: one numpy Generator per name, all from one seed.

Each stream is seeded by ``SeedSequence(seed, spawn_key=(h,))`` where ``h`` is a stable
64-bit hash (BLAKE2b) of the stream name. A stream therefore depends only on the seed
and its own name: adding or removing a stream never shifts another, and the same name
gives the same numbers in any process (Python's ``hash`` is salted and never used).
"""

from __future__ import annotations

import hashlib

import numpy as np


def stable_hash(name: str) -> int:
    """A 64-bit hash of ``name`` that is the same in every process and platform."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")


class RandomStreams:
    """A family of named, independent ``numpy.random.Generator`` streams from one seed."""

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.seed = seed
        self._streams: dict[str, np.random.Generator] = {}

    def __call__(self, name: str) -> np.random.Generator:
        """The generator for ``name`` (created on first use, then reused)."""
        gen = self._streams.get(name)
        if gen is None:
            ss = np.random.SeedSequence(self.seed, spawn_key=(stable_hash(name),))
            gen = np.random.Generator(np.random.PCG64(ss))
            self._streams[name] = gen
        return gen

    def names(self) -> list[str]:
        """Names of the streams used so far."""
        return sorted(self._streams)
