"""Where a big frame's payload lands: its receive block.

A frame too big for a wire's receive buffer is read straight into the
memory that the received numpy arrays will view, once its header is in
(:class:`~.wire.Wire`'s ``get_buffer``): no joins, no second copy.

- **Reused.** Faulting in fresh pages costs about a third of a 64 MiB TCP
  receive (measured: 7-11 ms of ~30 ms), so the last ``_CACHE_BLOCKS``
  blocks (of at most ``_CACHE_BLOCK_MAX`` bytes) are kept and reused once
  nothing but the cache refers to them: every array decoded from a block
  keeps it as its base, so the refcount tells.
- **Grown with what comes** (issue 21: a peer spends our memory only with
  bytes it has sent). A frame over ``GROW_FROM`` that no kept block fits
  lands in an anonymous mapping that starts at ``GROW_FROM`` and doubles as
  its bytes arrive (:func:`extend`: ``mremap`` moves page tables, not bytes),
  so a lying length prefix costs memory only for what came (address space:
  twice that, or 16 MiB).
"""
from __future__ import annotations

import mmap
import sys

import numpy as np

from .codec import huge_pages

__all__ = ["FrameBlocks", "extend", "GROW_FROM"]

GROW_FROM = 16 << 20              # a bigger frame's block starts this big and doubles
_CACHE_BLOCKS = 2                 # big-frame receive blocks kept for reuse...
_CACHE_BLOCK_MAX = 256 << 20      # ...when at most this big


class FrameBlocks:
    """One wire's receive blocks: the few it keeps for reuse."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: list[np.ndarray] = []

    def take(self, size: int, got: int) -> np.ndarray | mmap.mmap:
        """A destination for a payload of ``size`` bytes, ``got`` of them in
        already: a kept block the user has dropped, a fresh one, or (over
        ``GROW_FROM``, none fitting) a mapping that grows (:func:`extend`)."""
        cache = self._cache
        for i in range(len(cache)):
            if cache[i].size == size and sys.getrefcount(cache[i]) == 2:  # the cache, the argument
                block = cache.pop(i)
                break
        else:
            if size > GROW_FROM:
                grown = mmap.mmap(-1, min(size, max(GROW_FROM, got)),
                                  mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                huge_pages(grown)
                return grown
            block = np.empty(size, np.uint8)
        self.keep(block)
        return block

    def keep(self, block: np.ndarray) -> None:
        """Keep ``block`` for reuse (a grown mapping once final, as its array)."""
        if block.size <= _CACHE_BLOCK_MAX:
            self._cache.append(block)
            if len(self._cache) > _CACHE_BLOCKS:
                del self._cache[0]

    def clear(self) -> None:
        """Let go of every kept block (a closed wire)."""
        self._cache = []


def extend(block: mmap.mmap, size: int, filled: int) -> mmap.mmap:
    """``block`` grown to ``size`` bytes, its first ``filled`` kept: resized in
    place (``mremap``), or, while the event loop still holds a view of it (it
    may, until its read call returns), a new mapping with the bytes copied.
    The caller has released its own views."""
    try:
        block.resize(size)
    except BufferError:
        old, block = block, mmap.mmap(-1, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        huge_pages(block)
        with memoryview(block) as new, memoryview(old) as was:
            new[:filled] = was[:filled]
    return block
