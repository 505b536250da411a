"""Deterministic randomness for the vector generators: a vector depends only on the seed and on its own labels."""
from __future__ import annotations

import hashlib
from typing import Any, Sequence, Tuple


#: The seed of the committed vector files.
DEFAULT_SEED = 1


class Rng:
    """Deterministic bytes from (seed, path): SHA-256(prefix ‖ counter) blocks.

    ``child(*labels)`` gives an independent stream, so adding a vector never
    changes the bytes of another one.
    """

    def __init__(self, seed: int, *path: str) -> None:
        self.seed = int(seed)
        self.path: Tuple[str, ...] = tuple(str(p) for p in path)
        self._prefix = hashlib.sha256(("pe-vectors\0" + str(self.seed) + "\0" + "\0".join(self.path)).encode()).digest()
        self._counter = 0
        self._buf = b""

    def child(self, *labels: object) -> "Rng":
        return Rng(self.seed, *self.path, *(str(x) for x in labels))

    def bytes(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += hashlib.sha256(self._prefix + self._counter.to_bytes(8, "big")).digest()
            self._counter += 1
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def int(self, lo: int, hi: int) -> int:
        """Uniform in lo..hi (inclusive), by rejection."""
        span = hi - lo + 1
        if span <= 0:
            raise ValueError("empty range")
        nbytes = (span.bit_length() + 7) // 8 + 1
        limit = (256**nbytes // span) * span
        while True:
            v = int.from_bytes(self.bytes(nbytes), "big")
            if v < limit:
                return lo + v % span

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.int(0, len(seq) - 1)]
