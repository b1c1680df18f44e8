"""Which tokens a constrained answer may take next, as the last stage's head applies it.

The coordinator's grammar engine (:mod:`~fleetgui.runtime.constraint`) computes the allowed
tokens of each position a pass decides; the mask travels with the head op to the last stage,
which sets every other token's logit to -inf before the greedy choice, the sampling or the
verification of drafts. Only token ids come back, as without a mask.

A mask is a packed bitmask, 32 tokens a word, bit ``i % 32`` of word ``i // 32`` set when
token ``i`` is allowed: the layout of llguidance's and xgrammar's bitmasks, so the engine's
buffer is sent as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Words a row may have: 2**16 words hold 2,097,152 token ids, far beyond any vocabulary.
MAX_WORDS = 1 << 16


@dataclass(frozen=True, slots=True, eq=False)
class TokenMask:
    """The allowed tokens of ``rows`` consecutive positions: ``bits`` is uint32 ``[rows,
    words]``."""

    bits: npt.NDArray[np.uint32]

    def __post_init__(self) -> None:
        bits = np.asarray(self.bits)
        if bits.dtype.kind not in "iu" or bits.dtype.itemsize != 4:
            raise ValueError(f"a token mask must be 32-bit words, got dtype {bits.dtype}")
        if bits.ndim != 2 or bits.shape[0] == 0 or not 0 < bits.shape[1] <= MAX_WORDS:
            raise ValueError(f"a token mask must be [rows, words], got shape {bits.shape}")
        object.__setattr__(self, "bits", np.ascontiguousarray(bits).view(np.uint32))

    @classmethod
    def allowing(cls, rows: Sequence[Sequence[int]], vocab: int) -> TokenMask:
        """The mask that allows exactly ``rows[r]``'s token ids at position ``r``."""
        bits = np.zeros((len(rows), (vocab + 31) // 32), dtype=np.uint32)
        for r, row in enumerate(rows):
            ids = np.asarray(row, dtype=np.int64)
            one = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
            np.bitwise_or.at(bits[r], ids >> 5, one)
        return cls(bits)

    @property
    def rows(self) -> int:
        return int(self.bits.shape[0])

    def allowed(self, vocab: int) -> npt.NDArray[np.bool_]:
        """``[rows, vocab]``: whether each token is allowed at each position (tokens beyond the
        mask's words are not)."""
        # little-endian words, least significant bit first: token 32 * j + i is word j's bit i
        bits = np.unpackbits(self.bits.astype("<u4").view(np.uint8), axis=1, bitorder="little")
        flags: npt.NDArray[np.bool_] = bits[:, :vocab].astype(bool)
        if flags.shape[1] < vocab:
            flags = np.pad(flags, ((0, 0), (0, vocab - flags.shape[1])))
        return flags

    def apply(self, logits: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """``logits`` ``[rows, V]`` with every token the mask does not allow at -inf.

        A row that allows no token of the vocabulary raises :class:`ValueError`: the grammar
        and the model disagree on the vocabulary, and no choice would be right."""
        x = np.array(logits, dtype=np.float32)  # a copy: the request's output stays as it was
        if x.ndim != 2 or x.shape[0] != self.rows:
            raise ValueError(f"logits {x.shape} do not match a mask of {self.rows} rows")
        allowed = self.allowed(x.shape[1])
        if not allowed.any(axis=1).all():
            raise ValueError("the token mask allows no token of the model's vocabulary")
        x[~allowed] = -np.inf
        return x

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenMask):
            return NotImplemented
        return bool(np.array_equal(self.bits, other.bits))

    __hash__ = None  # type: ignore[assignment]  # holds an array: equal by value, not hashable
