"""Run a ``HeadOp`` on the last stage's outputs: greedy picks read the compact top-1 output,
sampling and speculative sampling read the logits, and only token ids come back."""

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
from fleetgui.runtime.verification import verify_greedy, verify_sampling


def _top1(request: Any, last: int, has_top1: bool) -> np.ndarray:
    """Argmax token ids of the last ``last`` positions, from ``top1_ids`` when the model has it
    (fleetgui stages) or from the logits (monolithic/optimum models)."""
    if has_top1:
        return np.asarray(request.get_tensor("top1_ids").data[0, -last:])
    return np.asarray(request.get_tensor("logits").data[0, -last:].argmax(-1))


def _logits(request: Any, last: int) -> np.ndarray:
    return np.asarray(request.get_tensor("logits").data[0, -last:])


def run_head(head: HeadOp, request: Any, *, has_top1: bool) -> tuple[list[int], int]:
    """The new tokens and the number of accepted drafts for ``head`` on ``request``'s outputs
    (``has_top1``: the model has the compact ``top1_ids`` output)."""
    if isinstance(head, GreedyHead):
        return [int(_top1(request, 1, has_top1)[0])], 0
    if isinstance(head, SampleHead):
        probs = probabilities(_logits(request, 1)[0], head.config)
        return [sample(probs, head.u)], 0
    if isinstance(head, VerifyGreedyHead):
        accepted, tokens = verify_greedy(
            _top1(request, len(head.drafts) + 1, has_top1), head.drafts
        )
        return tokens, accepted
    if isinstance(head, VerifySampleHead):
        probs = probabilities(_logits(request, len(head.drafts) + 1), head.config)
        accepted, tokens = verify_sampling(
            probs, head.drafts, head.draft_dists, head.u_accept, head.u_resample
        )
        return tokens, accepted
    raise TypeError(f"unknown head op {head!r}")
