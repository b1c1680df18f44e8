"""Verifying a speculative draft at the head: greedy prefix matching, and speculative sampling
(Leviathan et al. 2023), which keeps the target's distribution exactly. The uniforms come from
the coordinator (:func:`uniforms_for_round`), so a seed gives the same text wherever the head
runs."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fleetgui.runtime.head import FloatArray, SparseDist, check_uniform, sample

logger = logging.getLogger(__name__)


def verify_greedy(target_top1: npt.ArrayLike, drafts: Sequence[int]) -> tuple[int, list[int]]:
    """Greedy verification of ``K = len(drafts)`` draft tokens.

    ``target_top1[i]`` (``K + 1`` entries) is the target's argmax at verified position ``i``:
    position 0 predicts the token after the last committed one, position ``i`` the token after
    ``drafts[i - 1]``. Returns ``(accepted, new_tokens)``: ``accepted`` is the length of the
    longest prefix of ``drafts`` equal to ``target_top1[:K]`` and ``new_tokens`` is
    ``drafts[:accepted] + [target_top1[accepted]]`` (the correction, or the bonus token when all
    ``K`` were accepted), so at least one token is always produced. ``K = 0`` is a plain greedy
    step.
    """
    top1 = np.asarray(target_top1).reshape(-1)
    k = len(drafts)
    if top1.shape[0] != k + 1:
        raise ValueError(
            f"need K + 1 = {k + 1} target argmaxes for {k} drafts, got {top1.shape[0]}"
        )
    accepted = 0
    while accepted < k and int(drafts[accepted]) == int(top1[accepted]):
        accepted += 1
    return accepted, [int(t) for t in drafts[:accepted]] + [int(top1[accepted])]


def verify_sampling(
    target_probs: npt.ArrayLike,
    drafts: Sequence[int],
    draft_dists: Sequence[SparseDist],
    u_accept: Sequence[float],
    u_resample: float,
) -> tuple[int, list[int]]:
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1) of ``K = len(drafts)`` drafts.

    ``target_probs`` is ``[K + 1, V]``: :func:`probabilities` of the target's logits at the
    ``K + 1`` verified positions with the stream's params (row ``i`` is conditioned on the
    committed text plus ``drafts[:i]``). ``draft_dists[i]`` is the draft's distribution ``q_i``
    that ``drafts[i]`` was sampled from, conditioned on the same prefix. For ``i = 0 .. K-1``:
    accept ``drafts[i]`` iff ``u_accept[i] < min(1, p_i(d_i) / q_i(d_i))``; at the first
    rejection, sample the replacement from ``norm(max(0, p_i - q_i))`` with ``u_resample`` and
    stop; if all ``K`` are accepted, sample the bonus token from ``p_K`` with ``u_resample``.
    Returns ``(accepted, new_tokens)`` with ``new_tokens = drafts[:accepted] + [one token]``.

    Why the output keeps the target's distribution: fix a position ``i`` reached with prefix
    accepted, write ``p, q`` for ``p_i, q_i`` and ``alpha = sum_x min(p(x), q(x))``. The token
    emitted there is ``x`` either because the draft proposed ``x`` (probability ``q(x)``) and it
    was accepted (probability ``min(1, p(x)/q(x))``), together ``min(p(x), q(x))``; or because
    the proposal was rejected, which happens with probability
    ``sum_y q(y) (1 - min(1, p(y)/q(y))) = 1 - alpha``, and then ``x`` was drawn from the
    residual ``max(0, p - q) / (1 - alpha)`` (its mass is ``sum (p - min(p, q)) = 1 - alpha``).
    The total is ``min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x)``. By induction over positions
    every emitted token is distributed as the target's conditional, given the tokens before it;
    the bonus token is drawn from ``p_K`` directly. This needs ``u_accept[i]`` and
    ``u_resample`` independent of each other and of the uniforms the draft used; one
    ``u_resample`` serves both the replacement and the bonus because a round uses only one.

    Guards: ``q_i(d_i) == 0`` (impossible if the draft sampled from ``q_i``) rejects. A residual
    that is all zero means ``p_i == q_i`` (acceptance is then certain up to rounding), so the
    replacement is sampled from ``p_i``, which is the correct conditional in that case. Draft
    ids at or past ``V`` (a draft whose padded vocabulary is wider than the target's logits)
    have target probability 0: they are rejected and ignored in the residual.
    """
    p = np.asarray(target_probs, dtype=np.float64)
    k = len(drafts)
    if p.ndim != 2 or p.shape[0] != k + 1 or p.shape[1] == 0:
        raise ValueError(
            f"target_probs must have shape [K + 1, V] = [{k + 1}, V] for {k} drafts, got {p.shape}"
        )
    if len(draft_dists) != k or len(u_accept) != k:
        raise ValueError(
            f"need one draft distribution and one accept uniform per draft: {k} drafts, "
            f"{len(draft_dists)} distributions, {len(u_accept)} uniforms"
        )
    vocab = p.shape[1]
    resample_u = check_uniform(u_resample, "u_resample")
    new_tokens: list[int] = []
    for i in range(k):
        token = int(drafts[i])
        if token < 0:
            raise ValueError(f"draft token {token} is negative")
        u = check_uniform(u_accept[i], f"u_accept[{i}]")
        dist = draft_dists[i]
        q_token = dist.prob_of(token)
        # Ids past the target's vocabulary (a draft with a wider, padded vocabulary) have
        # target probability 0: such a draft is rejected, never an error.
        p_token = float(p[i, token]) if token < vocab else 0.0
        if q_token > 0.0 and u < min(1.0, p_token / q_token):
            new_tokens.append(token)
            continue
        if q_token <= 0.0:
            logger.debug("draft %d proposed token %d outside its own distribution", i, token)
        residual = p[i].copy()
        inside = dist.ids < vocab
        residual[dist.ids[inside]] -= dist.probs[inside]  # ids are unique: no lost updates
        np.maximum(residual, 0.0, out=residual)
        if not float(residual.sum()) > 0.0:
            logger.debug("residual at draft %d is empty (p == q): sampling from p", i)
            residual = p[i]
        new_tokens.append(sample(residual, resample_u))
        return i, new_tokens
    new_tokens.append(sample(p[k], resample_u))
    return k, new_tokens


def uniforms_for_round(rng: np.random.Generator, k: int) -> tuple[FloatArray, float]:
    """The uniforms one verification round of ``k`` drafts needs: ``(u_accept[k], u_resample)``.

    Always draws ``k + 1`` doubles from ``rng``, accept uniforms first, so the stream advances
    by the same amount whatever the round's outcome and a seed replays identically. The draft's
    own sampling uniforms must be drawn separately (not reused from these).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    draws = rng.random(k + 1)
    return draws[:k], float(draws[k])
