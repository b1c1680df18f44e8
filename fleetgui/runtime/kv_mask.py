"""Per-stream KV bookkeeping of one stage: the attention mask over its cache entries.

Mask-based rewind (paper section 5): rejected speculative entries stay in the cache with mask 0
and the position moves back; the next token is written after them. Compaction drops masked
entries when they waste too much, which the paper left undone.
"""

from __future__ import annotations

import numpy as np

_INITIAL_CAPACITY = 256


class StreamMask:
    """The attention mask over a stream's KV entries on one stage, and its next position."""

    def __init__(self) -> None:
        self._mask = np.zeros((1, _INITIAL_CAPACITY), dtype=np.int64)
        self._len = 0  # entries in the cache, live or masked
        self._live = 0  # entries with mask 1 == the next position

    @property
    def entries(self) -> int:
        return self._len

    @property
    def live(self) -> int:
        return self._live

    @property
    def masked(self) -> int:
        return self._len - self._live

    def reset(self) -> None:
        self._len = self._live = 0

    def rewind(self, n_positions: int) -> None:
        """Mask out the ``n_positions`` newest live entries."""
        if not 0 <= n_positions <= self._live:
            raise ValueError(f"cannot rewind {n_positions} positions of {self._live}")
        remaining = n_positions
        index = self._len - 1
        while remaining and index >= 0:
            if self._mask[0, index]:
                self._mask[0, index] = 0
                remaining -= 1
            index -= 1
        self._live -= n_positions

    def live_indices(self) -> np.ndarray:
        """Indices of live entries, for compaction."""
        return np.flatnonzero(self._mask[0, : self._len])

    def compacted(self) -> None:
        """Record that the cache now holds only the live entries, in order."""
        self._mask[0, : self._live] = 1
        self._len = self._live

    def advance(self, n_positions: int) -> tuple[np.ndarray, np.ndarray]:
        """Append ``n_positions`` live entries; return (attention_mask, position_ids) inputs."""
        needed = self._len + n_positions
        if needed > self._mask.shape[1]:
            grown = np.zeros((1, max(needed, 2 * self._mask.shape[1])), dtype=np.int64)
            grown[:, : self._len] = self._mask[:, : self._len]
            self._mask = grown
        self._mask[0, self._len : needed] = 1
        positions = np.arange(self._live, self._live + n_positions, dtype=np.int64)[None, :]
        self._len = needed
        self._live += n_positions
        return self._mask[:, :needed], positions
