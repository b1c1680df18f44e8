"""The SmolLM2 draft's distillation loss (``fleetgui.training.draft_distiller.candidates``), on
tiny random models: over the candidate set it is zero for the target itself and falls when a
draft trains on it."""

from __future__ import annotations

from typing import Any

from training_support import random_llama


def test_the_candidate_loss_is_zero_for_the_target_itself_and_falls_when_training() -> None:
    import torch

    from fleetgui.training.continuations import continue_prompts
    from fleetgui.training.draft_distiller.candidates import (
        CandidateLoss,
        candidate_loss,
        make_distill_set,
        train_candidate_draft,
    )
    from fleetgui.training.train import TrainSchedule

    target = random_llama(seed=1)
    with torch.no_grad():  # tied like SmolLM2's, and peaked enough to have something to learn
        target.model.embed_tokens.weight.mul_(3.0)
    target.lm_head.weight = target.model.embed_tokens.weight
    prompts = [[i, i + 1, i + 2] for i in range(3, 40, 3)]
    answers = continue_prompts(
        target, prompts, max_new_tokens=16, stop_ids=[], pad_id=0, batch_size=8
    )
    data = make_distill_set(answers, frequent=64)
    head = target.get_output_embeddings().weight.detach()
    spec = CandidateLoss(frequent=64, random=32, hard_weight=0.0)

    def loss_over_the_set(model: Any) -> float:
        with torch.no_grad():
            hidden = [
                model.model(input_ids=ids[None, :-1]).last_hidden_state[0, start:]
                for ids, start in zip(data.ids, data.starts, strict=True)
            ]
            value = candidate_loss(
                torch.cat(hidden),
                torch.cat(data.hidden),
                torch.cat(data.top_ids),
                head,
                extra=data.frequent,
                spec=spec,
            )
        return float(value)

    assert abs(loss_over_the_set(target)) < 1e-5

    draft = random_llama(seed=2)
    draft.model.embed_tokens.weight.data.copy_(target.model.embed_tokens.weight.data)
    draft.lm_head.weight = draft.model.embed_tokens.weight
    draft.model.embed_tokens.weight.requires_grad_(False)
    before = loss_over_the_set(draft)
    schedule = TrainSchedule(
        steps=40, batch_size=4, seq_len=0, lr=1e-2, warmup_steps=2, weight_decay=0.0
    )
    train_candidate_draft(draft, data, schedule, spec, 0, pad_id=0)
    assert loss_over_the_set(draft) < 0.5 * before
    assert torch.equal(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)
