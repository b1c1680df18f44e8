"""The parts of the SmolLM2 draft's build, on tiny random models: programmatic questions and
their held-out split, batched continuations with what the model predicted, the candidate-set
distillation loss."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgui.training.draft_distiller.chat_prompts import KINDS, all_questions, make_prompts


def test_held_out_questions_share_no_subject_with_training_ones() -> None:
    for kind in KINDS:
        train = {q.text for q in all_questions(kind, heldout=False)}
        held = {q.text for q in all_questions(kind, heldout=True)}
        assert train and held and not train & held
    # a held-out subject never appears in a training question, under any template
    assert not any("France" in q.text for q in all_questions("chat", heldout=True))
    assert any("Ireland" in q.text for q in all_questions("chat", heldout=True))
    assert not any("Ireland" in q.text for q in all_questions("chat", heldout=False))


def test_prompts_are_seeded_distinct_and_mixed_as_asked() -> None:
    first = make_prompts(40, 0.25, seed=3, heldout=False)
    assert first == make_prompts(40, 0.25, seed=3, heldout=False)
    assert first != make_prompts(40, 0.25, seed=4, heldout=False)
    assert len({q.text for q in first}) == 40
    assert sum(q.kind == "code" for q in first) == 10
    with pytest.raises(ValueError, match="code questions"):
        make_prompts(60, 0.9, seed=0, heldout=True)


def _tiny_llama(seed: int = 0) -> Any:
    import torch
    from model_factory import make_config

    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(make_config("llama", n_layers=2)).eval()


def test_batched_continuations_equal_one_prompt_at_a_time_and_keep_what_the_model_saw() -> None:
    import torch

    from fleetgui.training.continuations import continue_prompts

    model = _tiny_llama()
    prompts = [[5, 9, 11], [7, 3, 2, 8, 8, 4, 6], [12, 13], [4, 4, 4, 4, 9]]
    common: dict[str, Any] = dict(max_new_tokens=10, stop_ids=[1], pad_id=0)
    batched = continue_prompts(model, prompts, batch_size=4, **common)
    alone = [continue_prompts(model, [p], batch_size=1, **common)[0] for p in prompts]
    for b, a, prompt in zip(batched, alone, prompts, strict=True):
        assert b.ids[: len(prompt)] == prompt and b.prompt_len == len(prompt)
        assert b.ids == a.ids  # left padding changed nothing
        assert b.hidden is not None and b.top_ids is not None
        # what was kept equals a teacher-forced pass over the whole sequence
        with torch.no_grad():
            full = model.model(input_ids=torch.tensor([b.ids[:-1]])).last_hidden_state[0]
            chosen = model.lm_head(b.hidden.clone()).argmax(-1).tolist()
        torch.testing.assert_close(b.hidden, full[b.prompt_len - 1 :], atol=2e-5, rtol=1e-4)
        assert chosen == b.generated and b.top_ids[:, 0].tolist() == b.generated


def test_a_continuation_stops_at_its_end_of_turn_token() -> None:
    from fleetgui.training.continuations import continue_prompts

    model = _tiny_llama()
    free = continue_prompts(
        model, [[5, 9, 11]], max_new_tokens=12, stop_ids=[], pad_id=0, batch_size=1
    )[0]
    stop = free.generated[3]
    first = free.generated.index(stop)
    stopped = continue_prompts(
        model, [[5, 9, 11]], max_new_tokens=12, stop_ids=[stop], pad_id=0, batch_size=1
    )[0]
    assert stopped.generated == free.generated[: first + 1]
    assert stopped.hidden is not None and len(stopped.hidden) == first + 1


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

    target = _tiny_llama(seed=1)
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

    draft = _tiny_llama(seed=2)
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


def test_shared_out_batches_are_batched_the_same_way_again() -> None:
    from fleetgui.training.continuations import length_batches
    from fleetgui.training.draft_distiller.target_answers import split_batches

    prompts = [[1] * n for n in (5, 3, 9, 3, 7, 1, 4, 4, 8, 2, 6)]
    batches = length_batches(prompts, 3)
    mine, theirs = split_batches(prompts, 3)
    assert sorted(mine + theirs) == list(range(len(prompts)))
    for share, expected in ((mine, batches[0::2]), (theirs, batches[1::2])):
        again = length_batches([prompts[i] for i in share], 3)
        assert [[share[i] for i in batch] for batch in again] == expected


def test_the_draft_builds_progress_fraction_uses_its_own_phases() -> None:
    from fleetgui.training.draft_distiller.distiller import PHASE_WEIGHTS
    from fleetgui.training.progress import BuildProgress, PhaseTracker

    events: list[BuildProgress] = []
    phases = PhaseTracker(events.append, PHASE_WEIGHTS)
    for name in PHASE_WEIGHTS:
        with phases.phase(name):
            phases.report(name, 1, 2)
    overall = [e.overall for e in events]
    assert overall == sorted(overall) and overall[0] == 0.0
    assert overall[-1] == pytest.approx(1.0)
    assert events[0].label == "loading the target"
