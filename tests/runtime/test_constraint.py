"""Constrained decoding's parts: the token mask the head applies, and the grammar state that
makes it (llguidance on SmolLM2's real vocabulary)."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgui.runtime.constraint import ConstraintError, GrammarEngine, grammar_of_schema
from fleetgui.runtime.token_mask import TokenMask
from fleetgui.runtime.tokenizer import Tokenizer

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_a_mask_allows_exactly_its_tokens_and_sets_the_rest_to_minus_inf() -> None:
    mask = TokenMask.allowing([[0, 31, 32, 69], [5]], vocab=70)
    assert mask.bits.shape == (2, 3) and mask.rows == 2
    allowed = mask.allowed(75)  # tokens past the mask's words are not allowed
    assert np.flatnonzero(allowed[0]).tolist() == [0, 31, 32, 69]
    assert np.flatnonzero(allowed[1]).tolist() == [5]
    logits = np.arange(150, dtype=np.float32).reshape(2, 75)
    masked = mask.apply(logits)
    assert masked[0].argmax() == 69 and masked[1].argmax() == 5
    assert np.isneginf(masked[0, 70:]).all() and logits[0, 70] == 70  # the input is untouched
    assert mask == TokenMask(mask.bits.copy()) and mask != TokenMask.allowing([[1], [5]], 70)


def test_a_mask_that_allows_nothing_of_the_vocabulary_is_an_error() -> None:
    mask = TokenMask.allowing([[100]], vocab=128)
    with pytest.raises(ValueError, match="allows no token"):
        mask.apply(np.zeros((1, 64), dtype=np.float32))
    with pytest.raises(ValueError, match="do not match"):
        mask.apply(np.zeros((2, 128), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\[rows, words\]"):
        TokenMask(np.zeros((0, 4), dtype=np.uint32))
    with pytest.raises(ValueError, match="32-bit"):
        TokenMask(np.zeros((1, 4), dtype=np.uint8))


def test_the_masks_follow_the_tokens_of_a_schema_valid_answer(
    smollm2_grammar: tuple[GrammarEngine, Tokenizer],
) -> None:
    grammar_engine, tokenizer = smollm2_grammar
    constraint = grammar_engine.constraint(grammar_of_schema(PERSON))
    answer = tokenizer.encode('{"name": "Ada", "age": 36}')
    vocab = grammar_engine.tokenizer.vocab_size
    assert not constraint.mask().allowed(vocab)[0][tokenizer.encode("Hello")[0]]  # not JSON
    for token in answer:
        assert constraint.mask().allowed(vocab)[0][token], tokenizer.decode([token])
        constraint.accept([token])
    assert constraint.done  # the object is closed: only the end of the answer may follow
    assert set(np.flatnonzero(constraint.mask().allowed(vocab)[0])) <= tokenizer.eos_token_ids
    with pytest.raises(ConstraintError, match="left its grammar"):
        constraint.accept(tokenizer.encode("x"))


def test_a_rounds_masks_assume_the_drafts_before_them_and_leave_the_state_as_it_was(
    smollm2_grammar: tuple[GrammarEngine, Tokenizer],
) -> None:
    grammar_engine, tokenizer = smollm2_grammar
    grammar = grammar_of_schema(PERSON)
    vocab = grammar_engine.tokenizer.vocab_size
    answer = tokenizer.encode('{"name": "Bo", "age": 7}')
    constraint = grammar_engine.constraint(grammar)
    constraint.accept(answer[:2])
    drafts = answer[2:6]
    window = constraint.mask(drafts)
    assert window.rows == len(drafts) + 1
    step_by_step = grammar_engine.constraint(grammar)
    step_by_step.accept(answer[:2])
    for row, draft in enumerate(drafts):
        assert np.array_equal(window.allowed(vocab)[row], step_by_step.mask().allowed(vocab)[0])
        step_by_step.accept([draft])
    # the state is as before the round: the next mask is the one after the two accepted tokens
    again = grammar_engine.constraint(grammar)
    again.accept(answer[:2])
    assert constraint.mask() == again.mask()
    # a draft the grammar refuses: its row excludes it, the rows after it allow everything
    prose = tokenizer.encode(" Hello there")
    refused = constraint.mask(prose)
    assert not refused.allowed(vocab)[0][prose[0]]
    assert refused.allowed(vocab)[1:].all()


def test_an_invalid_schema_is_an_error_that_names_the_problem(
    smollm2_grammar: tuple[GrammarEngine, Tokenizer],
) -> None:
    grammar_engine, _ = smollm2_grammar
    with pytest.raises(ConstraintError, match="nonsense"):
        grammar_engine.check(grammar_of_schema({"type": "nonsense"}))
    grammar_engine.check(grammar_of_schema(PERSON))  # a good one passes
    with pytest.raises(ConstraintError, match="serialized"):
        grammar_of_schema({"type": object()})  # type: ignore[dict-item]
