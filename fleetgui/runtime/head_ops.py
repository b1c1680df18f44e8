"""Run a ``HeadOp`` on the last stage's outputs: greedy picks read the compact top-1 output,
sampling and speculative sampling read the logits, and only token ids come back. A head with
a token mask (a constrained answer) reads the logits and chooses among the allowed tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetgui.runtime.head import probabilities, sample
from fleetgui.runtime.stage import (
    GreedyHead,
    HeadOp,
    SampleHead,
    VerifyGreedyHead,
    VerifySampleHead,
)
from fleetgui.runtime.token_logprobs import TokenLogprob, logprobs_of
from fleetgui.runtime.token_mask import TokenMask
from fleetgui.runtime.verification import verify_greedy, verify_sampling


def _top1(request: Any, last: int, has_top1: bool) -> np.ndarray:
    """Argmax token ids of the last ``last`` positions, from ``top1_ids`` when the model has it
    (fleetgui stages) or from the logits (monolithic/optimum models)."""
    if has_top1:
        return np.asarray(request.get_tensor("top1_ids").data[0, -last:])
    return np.asarray(request.get_tensor("logits").data[0, -last:].argmax(-1))


def _logits(request: Any, last: int, mask: TokenMask | None = None) -> np.ndarray:
    logits = np.asarray(request.get_tensor("logits").data[0, -last:])
    return logits if mask is None else mask.apply(logits)


def _greedy(request: Any, last: int, has_top1: bool, mask: TokenMask | None) -> np.ndarray:
    """The argmax of the last ``last`` positions, among the allowed tokens if ``mask``."""
    if mask is None:
        return _top1(request, last, has_top1)
    return _logits(request, last, mask).argmax(-1)


def run_head(
    head: HeadOp, request: Any, *, has_top1: bool
) -> tuple[list[int], int, tuple[TokenLogprob, ...]]:
    """The new tokens, the number of accepted drafts and, if the head asks, the tokens'
    log-probabilities, for ``head`` on ``request``'s outputs (``has_top1``: the model has the
    compact ``top1_ids`` output)."""
    tokens, accepted = _choose(head, request, has_top1=has_top1)
    top = getattr(head, "logprobs", None)
    if top is None:
        return tokens, accepted, ()
    rows = np.asarray(
        request.get_tensor("logits").data[0, -(len(getattr(head, "drafts", ())) + 1) :]
    )
    return tokens, accepted, logprobs_of(rows, tokens, top)


def _choose(head: HeadOp, request: Any, *, has_top1: bool) -> tuple[list[int], int]:
    if isinstance(head, GreedyHead):
        return [int(_greedy(request, 1, has_top1, head.mask)[0])], 0
    if isinstance(head, SampleHead):
        probs = probabilities(_logits(request, 1, head.mask)[0], head.config)
        return [sample(probs, head.u)], 0
    if isinstance(head, VerifyGreedyHead):
        top1 = _greedy(request, len(head.drafts) + 1, has_top1, head.mask)
        accepted, tokens = verify_greedy(top1, head.drafts)
        return tokens, accepted
    if isinstance(head, VerifySampleHead):
        logits = _logits(request, len(head.drafts) + 1, head.mask)
        probs = probabilities(logits, head.config)
        accepted, tokens = verify_sampling(
            probs, head.drafts, head.draft_dists, head.u_accept, head.u_resample
        )
        return tokens, accepted
    raise TypeError(f"unknown head op {head!r}")
