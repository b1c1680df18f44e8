"""How often a draft's greedy proposals equal its target's greedy tokens (both trainers).

For a prompt, the target generates ``gen_len`` tokens greedily. At each of these positions the
draft predicts the next token from the target's prefix; ``matches[i]`` says whether it chose the
target's token. *Per-token agreement* is the mean of ``matches``.

In greedy speculative decoding with blocks of ``K`` proposals, the draft proposes tokens until one
differs from the target; as long as its proposals were right, its context is exactly the target's
prefix, so the j-th proposal of a block is right iff ``matches`` holds there. A block starting at
``i`` therefore accepts the run of ``True`` in ``matches[i:i+K]``, and the next block starts after
the target's own token. *Block acceptance* for K is accepted / proposed tokens over all blocks;
*tokens per target step* is the mean number of tokens each verification step produces
(accepted + 1). The toy pair measures it on held-out code (:func:`measure_acceptance`), the draft
distiller on the target's answers to held-out questions (:func:`agreement`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetgui.training.continuations import greedy_generate

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

    from fleetgui.training.continuations import Continuation

log = logging.getLogger(__name__)


@dataclass
class AcceptanceResult:
    """Agreement of draft and target on held-out prompts."""

    prompts: int
    tokens: int
    per_token: float
    block: dict[int, float] = field(default_factory=dict)
    tokens_per_step: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (K keys become strings)."""
        return {
            "prompts": self.prompts,
            "tokens": self.tokens,
            "per_token_agreement": round(self.per_token, 4),
            "block_acceptance": {str(k): round(v, 4) for k, v in self.block.items()},
            "tokens_per_target_step": {
                str(k): round(v, 3) for k, v in self.tokens_per_step.items()
            },
        }


def block_acceptance(matches: Sequence[bool], k: int) -> tuple[int, int, int]:
    """Simulate greedy speculative decoding with ``k`` proposals per block over one sequence.

    Returns ``(accepted, proposed, steps)``: draft tokens accepted, draft tokens proposed and
    target verification steps.
    """
    accepted = proposed = steps = 0
    i, n = 0, len(matches)
    while i < n:
        block = min(k, n - i)
        run = 0
        while run < block and matches[i + run]:
            run += 1
        accepted += run
        proposed += block
        steps += 1
        i += run + 1
    return accepted, proposed, steps


def draft_matches(
    draft: LlamaForCausalLM, sequences: torch.Tensor, prompt_len: int
) -> torch.Tensor:
    """``(N, G)`` booleans: whether the draft's argmax after each target prefix equals the
    target's next token, for the ``G`` generated positions of ``sequences``."""
    import torch

    draft.eval()
    with torch.inference_mode():
        logits = draft(input_ids=sequences[:, :-1]).logits
    predicted = logits[:, prompt_len - 1 :].argmax(-1)
    return predicted == sequences[:, prompt_len:]


def _result(rows: Sequence[Sequence[bool]], max_k: int, per_token: float) -> AcceptanceResult:
    """Block acceptance and tokens per target step for K = 1..``max_k`` over ``rows`` (one
    list of matches per prompt), with the per-token agreement the caller measured."""
    result = AcceptanceResult(
        prompts=len(rows), tokens=sum(len(r) for r in rows), per_token=per_token
    )
    for k in range(1, max_k + 1):
        accepted = proposed = steps = 0
        for row in rows:
            a, p, s = block_acceptance(row, k)
            accepted, proposed, steps = accepted + a, proposed + p, steps + s
        result.block[k] = accepted / proposed if proposed else 0.0
        result.tokens_per_step[k] = (accepted + steps) / steps if steps else 0.0
    return result


def summarize(matches: torch.Tensor, max_k: int) -> AcceptanceResult:
    """Per-token agreement and block acceptance for K = 1..``max_k`` from ``draft_matches``."""
    rows = [[bool(x) for x in row] for row in matches.tolist()]
    return _result(rows, max_k, float(matches.float().mean()))


def heldout_prompts(ids: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """``count`` prompts of ``length`` ids at evenly spaced offsets of the held-out stream."""
    import torch

    room = int(ids.numel()) - length
    if room <= 0:
        raise ValueError("held-out text is shorter than one prompt")
    starts = [i * room // count for i in range(count)]
    return torch.stack([ids[s : s + length] for s in starts])


def measure_acceptance(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    prompts: torch.Tensor,
    gen_len: int,
    *,
    max_k: int = 8,
    batch_size: int = 64,
) -> tuple[AcceptanceResult, torch.Tensor]:
    """Greedy target continuations of ``prompts`` and the draft's agreement with them.

    Returns the result and the generated sequences (``(N, P + gen_len)``).
    """
    sequences = greedy_generate(target, prompts, gen_len, batch_size)
    result = summarize(draft_matches(draft, sequences, prompts.shape[1]), max_k)
    log.info(
        "acceptance on %d held-out prompts: per-token %.3f, K=4 block %.3f",
        result.prompts,
        result.per_token,
        result.block.get(4, float("nan")),
    )
    return result, sequences


def agreement(draft: LlamaForCausalLM, answers: list[Continuation], max_k: int) -> dict[str, Any]:
    """How often the draft's argmax after each prefix of the target's answers is the target's
    next token, and the acceptance of greedy speculation in blocks of K
    (:func:`block_acceptance`): what PP+SD's acceptance rate would be."""
    import torch

    rows: list[list[bool]] = []
    with torch.inference_mode():
        for c in answers:
            ids = torch.tensor([c.ids[:-1]], dtype=torch.long)
            predicted = draft(input_ids=ids).logits[0, c.prompt_len - 1 :].argmax(-1).tolist()
            rows.append([p == t for p, t in zip(predicted, c.generated, strict=True)])
    tokens = sum(len(r) for r in rows)
    return _result(rows, max_k, sum(sum(r) for r in rows) / max(1, tokens)).to_dict()
