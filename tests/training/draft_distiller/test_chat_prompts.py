"""The SmolLM2 draft's questions (``fleetgui.training.draft_distiller.chat_prompts``): a held-out
split that shares no subject with training, seeded prompts mixed as asked."""

from __future__ import annotations

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
