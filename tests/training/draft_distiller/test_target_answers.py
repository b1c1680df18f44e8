"""The target's answers the SmolLM2 draft learns from (``draft_distiller/target_answers.py``):
batches shared out between processes are batched the same way again."""

from __future__ import annotations


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
