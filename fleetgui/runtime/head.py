"""The last stage's head: turn the target model's logits into tokens without shipping logits.

The last pipeline stage holds the target model's full logits; they never cross the network.
This module is the small, pure-numpy "head" that runs there and turns them into token ids:

* :func:`probabilities` applies a request's temperature, top-k and top-p (nucleus) to logits;
* :func:`sample` draws one token by inverse-CDF sampling with a uniform supplied by the caller;
* :class:`SparseDist` is the draft model's distribution over its support only, which travels
  with the draft tokens so that the head can verify them
  (:mod:`~fleetgui.runtime.verification`).

Randomness never comes from here: the coordinator draws uniforms from each stream's seeded
generator (:func:`~fleetgui.runtime.verification.uniforms_for_round`) and sends them with the
request, so the same seed gives the same text wherever the head runs. Every function is
deterministic in its inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from fleetgui.generation_config import GenerationConfig

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]

# Mass slack for the nucleus test "mass >= top_p": softmax and cumulative sums in float64 are
# off by ~1e-16 per term, so a nucleus whose exact mass equals top_p may sum to a hair below it.
# 1e-9 is far above that rounding and far below any probability mass that matters.
_TOP_P_TOLERANCE = 1e-9

# How many of the most probable tokens the nucleus search sorts first (it widens the candidate
# set geometrically when their mass is below top_p); sorting a whole 150k vocabulary per row
# would dominate the head's latency.
_NUCLEUS_CANDIDATES = 1024


# --------------------------------------------------------------------------------------------
# Logits to probabilities


def _canonical_top(p: FloatArray, m: int) -> npt.NDArray[np.intp]:
    """A prefix of the canonical order of ``p`` (probability descending, token id ascending).

    The prefix holds the ``m`` most probable tokens and every token tied with the ``m``-th, so
    it is exactly the first ``len(result)`` entries of a full stable sort, found in O(V) plus a
    sort of the candidates only.
    """
    v = p.shape[0]
    if m >= v:
        candidates = np.arange(v)
    else:
        threshold = np.partition(p, v - m)[v - m]
        candidates = np.flatnonzero(p >= threshold)  # ascending ids
    # A stable sort of ascending ids by descending probability breaks ties by the lowest id.
    return candidates[np.argsort(-p[candidates], kind="stable")]


def _nucleus_size(cumulative: FloatArray, top_p: float) -> int:
    """How many leading tokens of a canonical order the nucleus keeps, given the cumulative sums
    of their probabilities.

    The rank-``r`` token is kept iff the mass of ranks ``< r`` is below ``top_p``: the smallest
    prefix whose mass reaches ``top_p`` (within ``_TOP_P_TOLERANCE``), and at least one token.
    Returns ``len(cumulative)`` when even the whole prefix falls short.
    """
    n = int(np.searchsorted(cumulative, top_p - _TOP_P_TOLERANCE, side="left")) + 1
    return min(n, cumulative.shape[0])


def _cut_row(p: FloatArray, top_k: int, top_p: float) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """The kept token ids and their renormalised probabilities after top-k, then top-p.

    ``top_k`` is 0 or below the vocabulary size; ``top_p`` is in (0, 1]. Top-p is applied to
    the distribution renormalised after the top-k cut.
    """
    if top_k:
        kept = _canonical_top(p, top_k)[:top_k]
        values = p[kept] / p[kept].sum()
        if top_p < 1.0:
            n = _nucleus_size(np.cumsum(values), top_p)
            kept, values = kept[:n], values[:n]
        return kept, values / values.sum()
    # Top-p alone: sort only the most probable candidates, widening until they hold top_p. The
    # cumulative sum is sequential, so its values on a prefix do not depend on how many
    # candidates were sorted: the result is the same as with a full sort.
    v = p.shape[0]
    m = _NUCLEUS_CANDIDATES
    while True:
        order = _canonical_top(p, m)
        cumulative = np.cumsum(p[order])
        if cumulative[-1] >= top_p - _TOP_P_TOLERANCE or order.shape[0] == v:
            break
        m *= 16
    kept = order[: _nucleus_size(cumulative, top_p)]
    return kept, p[kept] / p[kept].sum()


def probabilities(logits: npt.ArrayLike, config: GenerationConfig) -> FloatArray:
    """The token distribution(s) ``config``'s sampling fields define on ``logits``, in float64.

    ``logits`` is ``[V]`` or ``[N, V]`` (rows are independent). Steps per row:

    1. greedy: one-hot on the argmax (lowest id on exact ties), done;
    2. ``softmax(logits / temperature)`` in float64 with max-subtraction;
    3. top-k: keep the ``top_k`` most probable tokens (ties by lowest id), renormalise;
    4. top-p: keep the smallest set of most probable tokens (ties by lowest id) whose mass in the
       renormalised top-k distribution is >= ``top_p`` (always at least one token), renormalise.

    ``-inf`` logits are allowed (masked tokens get probability 0); NaN, ``+inf`` or an all
    ``-inf`` row raise :class:`ValueError`. The result has the shape of ``logits``.
    """
    config.check_sampling()  # a request from the network is checked here, at its use
    x = np.asarray(logits)
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise ValueError(f"logits must have shape [V] or [N, V] with V > 0, got {x.shape}")
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"logits must be real numbers, got dtype {x.dtype}")
    rows = np.atleast_2d(x)
    row_max = rows.max(axis=-1, keepdims=True)  # NaN propagates into the maximum
    if np.isnan(row_max).any() or np.isposinf(row_max).any():
        raise ValueError("logits contain NaN or +inf")
    if np.isneginf(row_max).any():
        raise ValueError("a row of logits is entirely -inf: no token is possible")

    if config.greedy:
        out = np.zeros(rows.shape, dtype=np.float64)
        out[np.arange(rows.shape[0]), rows.argmax(axis=-1)] = 1.0  # argmax: first maximum
        return out.reshape(x.shape)

    z = rows.astype(np.float64)
    z -= row_max  # max-subtraction first: exp cannot overflow
    z /= config.temperature
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)

    top_k = config.top_k if 0 < config.top_k < z.shape[-1] else 0
    if top_k or config.top_p < 1.0:
        for i in range(z.shape[0]):
            kept, values = _cut_row(z[i], top_k, config.top_p)
            z[i] = 0.0
            z[i, kept] = values
    return z.reshape(x.shape)


# --------------------------------------------------------------------------------------------
# Sampling


def check_uniform(u: float, name: str = "u") -> float:
    value = float(u)
    if not 0.0 <= value < 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be a uniform in [0, 1), got {u!r}")
    return value


def sample(probs: npt.ArrayLike, u: float) -> int:
    """The token id that inverse-CDF sampling picks for the uniform ``u`` in [0, 1).

    Token ids are laid out in increasing order on [0, total), each over an interval as long as
    its probability; the token whose interval contains ``u * total`` is returned. ``probs`` may
    be unnormalised (it is scaled by its sum). A zero-probability token is never returned: its
    interval is empty, and when ``u * total`` rounds onto the top of the CDF the last token with
    positive probability is returned.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.shape[0] == 0:
        raise ValueError(f"probs must have shape [V] with V > 0, got {p.shape}")
    value = check_uniform(u)
    cdf = np.cumsum(p)
    total = float(cdf[-1])
    if not (math.isfinite(total) and total > 0) or not bool((p >= 0).all()):
        raise ValueError("probs must be finite, non-negative and have a positive sum")
    # First index whose CDF exceeds the target: a zero-probability token repeats the previous
    # CDF value, which is <= target, so it can never be the first to exceed it.
    index = int(cdf.searchsorted(value * total, side="right"))
    if index >= p.shape[0]:  # float edge: u * total rounded up to total
        index = int(np.flatnonzero(p > 0)[-1])
    return index


# --------------------------------------------------------------------------------------------
# The draft's distribution, as it travels with the drafts


@dataclass(frozen=True, slots=True, eq=False)
class SparseDist:
    """A token distribution stored over its support only: ``probs[j]`` is the probability of
    token ``ids[j]``; every other token has probability 0.

    This is what travels with each draft token for speculative sampling. The draft must sample
    its token from exactly this distribution (use :meth:`sample`), because verification uses
    these stored probabilities as ``q``.
    """

    ids: IntArray  # int32, strictly increasing
    probs: npt.NDArray[np.floating[Any]]  # float32 or float64, non-negative, sums to 1

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        probs = np.asarray(self.probs)
        if ids.ndim != 1 or probs.shape != ids.shape or ids.shape[0] == 0:
            raise ValueError(
                f"ids and probs must be non-empty 1-D arrays of equal length, got shapes "
                f"{ids.shape} and {probs.shape}"
            )
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be integers, got dtype {ids.dtype}")
        if ids.dtype != np.int32:
            if ids.min() < 0 or ids.max() > np.iinfo(np.int32).max:
                raise ValueError("ids must fit in int32")
            ids = ids.astype(np.int32)
        if probs.dtype not in (np.float32, np.float64):
            probs = probs.astype(np.float64)
        if ids[0] < 0 or (ids.shape[0] > 1 and not bool(np.all(np.diff(ids) > 0))):
            raise ValueError("ids must be non-negative and strictly increasing")
        if not bool(np.all(np.isfinite(probs))) or not bool(np.all(probs >= 0)):
            raise ValueError("probs must be finite and non-negative")
        total = float(probs.sum(dtype=np.float64))
        if abs(total - 1.0) > 1e-4:
            raise ValueError(f"probs must sum to 1, got {total!r}")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "probs", probs)

    @classmethod
    def from_dense(
        cls,
        probs: npt.ArrayLike,
        *,
        max_support: int | None = None,
        dtype: npt.DTypeLike = np.float32,
    ) -> SparseDist:
        """The sparse form of the dense distribution ``probs`` ``[V]``.

        The support is every token with positive probability. ``max_support`` keeps only that
        many most probable tokens (ties by lowest id) and renormalises: a different
        distribution, which is fine as long as the draft samples from the result. Probabilities
        are renormalised in float64 and stored as ``dtype`` (float32 halves the bytes on the
        wire; the rounding changes ``q`` by ~1e-7 relative, which moves the verified
        distribution by the same order).
        """
        p = np.asarray(probs, dtype=np.float64)
        if p.ndim != 1:
            raise ValueError(f"probs must have shape [V], got {p.shape}")
        if not bool(np.all(np.isfinite(p))) or not bool(np.all(p >= 0)):
            raise ValueError("probs must be finite and non-negative")
        store = np.dtype(dtype)
        if store not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {store}")
        support = np.flatnonzero(p > 0)
        if support.shape[0] == 0:
            raise ValueError("probs has no token with positive probability")
        if max_support is not None:
            if max_support < 1:
                raise ValueError(f"max_support must be >= 1, got {max_support}")
            if support.shape[0] > max_support:
                support = np.sort(_canonical_top(p, max_support)[:max_support])
        kept = p[support]
        return cls(support.astype(np.int32), (kept / kept.sum()).astype(store))

    def to_dense(self, vocab_size: int) -> FloatArray:
        """The distribution as a dense float64 ``[vocab_size]`` array."""
        if int(self.ids[-1]) >= vocab_size:
            raise ValueError(
                f"token id {int(self.ids[-1])} is outside a vocabulary of {vocab_size} tokens"
            )
        dense = np.zeros(vocab_size, dtype=np.float64)
        dense[self.ids] = self.probs
        return dense

    def prob_of(self, token: int) -> float:
        """The probability of ``token`` (0.0 outside the support)."""
        j = int(self.ids.searchsorted(token))
        if j < self.ids.shape[0] and int(self.ids[j]) == token:
            return float(self.probs[j])
        return 0.0

    def sample(self, u: float) -> int:
        """The token that inverse-CDF sampling over the support (ids ascending) picks for ``u``.

        Equal to ``sample(self.to_dense(V), u)`` for any vocabulary size ``V``.
        """
        return int(self.ids[sample(self.probs, u)])

    @property
    def nbytes(self) -> int:
        """Bytes of the two arrays, i.e. what the distribution costs on the wire."""
        return int(self.ids.nbytes + self.probs.nbytes)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SparseDist):
            return NotImplemented
        return bool(
            np.array_equal(self.ids, other.ids)
            and self.probs.dtype == other.probs.dtype
            and np.array_equal(self.probs, other.probs)
        )

    __hash__ = None  # type: ignore[assignment]  # holds arrays: equal by value, not hashable
