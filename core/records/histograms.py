"""The bins summary.json counts source images in: by longest side and by file size.

Fixed bins, so that runs compare and the splits' counts add up; each bin is named by
its upper bound, and counted by the shard writer from what it reads and decodes anyway.
"""

from __future__ import annotations

import bisect

_SIDE_BOUNDS = (64, 128, 256, 512, 1024, 2048, 4096)
LONGEST_SIDE_BINS = (*(f"≤ {bound} px" for bound in _SIDE_BOUNDS), "> 4096 px")

_KB, _MB = 1 << 10, 1 << 20
_BYTE_BOUNDS = (4 * _KB, 16 * _KB, 64 * _KB, 256 * _KB, _MB, 4 * _MB, 16 * _MB)
FILE_BYTE_BINS = (
    "≤ 4 KB",
    "≤ 16 KB",
    "≤ 64 KB",
    "≤ 256 KB",
    "≤ 1 MB",
    "≤ 4 MB",
    "≤ 16 MB",
    "> 16 MB",
)


def longest_side_bin(pixels: int) -> str:
    return LONGEST_SIDE_BINS[bisect.bisect_left(_SIDE_BOUNDS, pixels)]


def file_bytes_bin(size: int) -> str:
    return FILE_BYTE_BINS[bisect.bisect_left(_BYTE_BOUNDS, size)]
