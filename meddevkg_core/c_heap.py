"""The C heap's free pages returned to the OS, so a stage does not carry the memory an earlier one freed."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS (glibc `malloc_trim`; False where there is none).

    numpy arrays of a few MB (each block's admitted pairs) are served from the heap, not mapped on
    their own, and the heap keeps their pages resident once they are freed (about 0.5 GB after
    Stage 2 at 200K patents, measured), which the next stage would carry. No value changes."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
