"""Check that a decrypted capture gives back the original frames exactly, and say so."""
from __future__ import annotations

import sys

from pecore.capture import read_capture


def main() -> int:
    original, decrypted, label = sys.argv[1], sys.argv[2], sys.argv[3]
    a, b = list(read_capture(original)), list(read_capture(decrypted))
    same_frames = sum(x.data == y.data for x, y in zip(a, b))
    same_times = sum((x.ts_sec, x.ts_nsec) == (y.ts_sec, y.ts_nsec) for x, y in zip(a, b))
    ok = len(a) == len(b) == same_frames == same_times
    print(f"{label}: {len(b)} frames, {same_frames} identical to the original, {same_times} with the original timestamp"
          f" -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
