"""Continuations a model writes (``fleetgui.training.continuations``), on tiny random models:
batched ones equal one prompt at a time and keep what the model saw; one stops at its
end-of-turn token."""

from __future__ import annotations

from typing import Any

from training_support import random_llama


def test_batched_continuations_equal_one_prompt_at_a_time_and_keep_what_the_model_saw() -> None:
    import torch

    from fleetgui.training.continuations import continue_prompts

    model = random_llama()
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

    model = random_llama()
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
