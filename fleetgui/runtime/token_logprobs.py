"""The log-probabilities of chosen tokens, as the last stage's head reports them when a request
asks (the API's ``logprobs`` / ``top_logprobs``).

They are the model's own distribution at each position, ``log_softmax`` of its logits before
temperature, top-k/top-p or a grammar's mask (what the model thinks, not what the sampler
did), computed in float64 where the logits are, so only a few numbers a token cross the
network. Ties among the top tokens go to the lowest id, as greedy choice does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: What OpenAI reports for a token the model gives no probability at all (-inf is not JSON).
LOGPROB_FLOOR = -9999.0


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A chosen token's log-probability, and the ``top`` most likely tokens at its position
    (most likely first)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def logprobs_of(logits: npt.ArrayLike, tokens: Sequence[int], top: int) -> tuple[TokenLogprob, ...]:
    """``tokens[i]``'s log-probability under row ``i`` of ``logits`` ``[rows, V]`` (rows past
    the tokens are not read), with the ``top`` most likely tokens of each row."""
    rows = np.asarray(logits, dtype=np.float64)[: len(tokens)]
    if rows.ndim != 2 or rows.shape[0] != len(tokens):
        raise ValueError(f"logits {rows.shape} do not hold a row for each of {len(tokens)} tokens")
    shifted = rows - rows.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    out = []
    for row, token in zip(logp, tokens, strict=True):
        best: tuple[tuple[int, float], ...] = ()
        if top:
            # the top candidates (and any tied with the last), then by value, ties by id
            candidates = np.argpartition(-row, min(top, row.shape[0] - 1))[: top + 1]
            ranked = sorted(candidates.tolist(), key=lambda i: (-row[i], i))[:top]
            best = tuple((int(i), _floor(row[i])) for i in ranked)
        out.append(TokenLogprob(int(token), _floor(row[token]), best))
    return tuple(out)


def _floor(value: float) -> float:
    return max(float(value), LOGPROB_FLOOR)
