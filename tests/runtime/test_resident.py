"""Conversations that stay on the stages (:mod:`fleetgui.runtime.resident`): a request that
continues an earlier one takes its stream, rewinds it to the shared prefix and prefills the
rest; the answers are token for token those of the same conversation run cold (f32, greedy)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.draft_source import NGRAM
from fleetgui.runtime.generation import FinishReason, GenerationResult
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.resident import ParkedStream, ResidentStreams, common_prefix
from fleetgui.runtime.sequence import FedTokens

# each conversation opens with more than MIN_PREFIX tokens, as chats do (a template, a system
# prompt): a shorter shared head is not worth another conversation's stream
TURNS = (
    "You are a helpful assistant who writes Python code for people.\ndef add(a, b):\n    return",
    " and now multiply them",
    " then divide, checking for zero",
    " finally print the results",
)
N_NEW = 12
EDITS = {2: ("add", "sum"), 3: ("checking for zero", "checking b")}


def parked(stream_id: int, tokens: list[int], prompt: int = 0, used: int = 0) -> ParkedStream:
    """A stream holding ``tokens``, the first ``prompt`` of them its last prompt."""
    target = FedTokens()
    target.applied(0, tokens)
    return ParkedStream(stream_id, target, prompt_tokens=prompt, last_used=used)


def test_take_continues_a_stream_and_lend_shares_a_prefix() -> None:
    resident = ResidentStreams(min_prefix=2)
    for stream in (parked(1, [1, 2, 3, 4], 2), parked(2, [1, 2, 9, 9, 9], 3), parked(3, [7, 7])):
        resident.park(stream)
    # stream 1's prompt [1, 2] and the start of its answer: the conversation goes on there
    taken = resident.take([1, 2, 3, 5, 6])
    assert taken is not None and (taken[0].stream_id, taken[1]) == (1, 3)
    assert [p.stream_id for p in resident.idle()] == [2, 3]
    # [1, 2] of stream 2's prompt [1, 2, 9]: another conversation (or an edit), so not taken
    assert resident.take([1, 2, 3]) is None
    lent = resident.lend([1, 2, 3])  # copied instead: out of the pool meanwhile
    assert lent is not None and (lent[0].stream_id, lent[1]) == (2, 2)
    assert [p.stream_id for p in resident.idle()] == [3]
    resident.park(lent[0])
    assert [p.stream_id for p in resident.idle()] == [3, 2]
    assert resident.take([5, 5, 5]) is None and resident.lend([5, 5, 5]) is None


def test_a_short_prompt_may_match_whole_and_a_tie_goes_to_the_most_recent() -> None:
    resident = ResidentStreams(min_prefix=16)
    resident.park(parked(1, [4, 5, 6]))
    resident.park(parked(2, [4, 5, 6, 7]))
    taken = resident.take([4, 5, 6])  # shorter than min_prefix, shared whole
    assert taken is not None and taken[0].stream_id == 2 and taken[1] == 3


def test_the_budget_evicts_the_least_recently_used_idle_streams() -> None:
    resident = ResidentStreams(budget_entries=10)
    assert resident.park(parked(1, [1] * 4)) == []
    assert resident.park(parked(2, [2] * 4)) == []
    evicted = resident.park(parked(3, [3] * 4))  # 12 > 10: the oldest goes
    assert [p.stream_id for p in evicted] == [1]
    assert [p.stream_id for p in resident.set_budget(4)] == [2]
    assert [p.stream_id for p in resident.drain()] == [3] and resident.idle() == []


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2


async def _conversation(
    pipe: Pipeline, config: GenerationConfig, *, edit_at: int | None = None
) -> list[GenerationResult]:
    """Four turns, each prompt the previous prompt and answer plus a new line; at ``edit_at``
    an earlier message is edited first, as a client editing history does (at turn 2 the first
    message, early in the history; at turn 3 the last one)."""
    results: list[GenerationResult] = []
    prompt = ""
    for turn, line in enumerate(TURNS):
        if turn == edit_at:
            old, new = EDITS[turn]
            prompt = prompt.replace(old, new, 1)
        prompt += line
        result = await pipe.complete(prompt, config)
        results.append(result)
        prompt += result.text
    return results


def _run(
    export: Path, config: GenerationConfig, *, reuse: bool, draft: Path | str | None = None,
    edit_at: int | None = None,
) -> list[GenerationResult]:  # fmt: skip
    async def main() -> list[GenerationResult]:
        pipe = pipeline(export, draft=draft, kv_reuse=reuse)  # type: ignore[arg-type]
        try:
            return await _conversation(pipe, config, edit_at=edit_at)
        finally:
            await pipe.close()

    return asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("k", "draft"),
    [("off", None), (3, "ngram"), ("auto", "ngram"), (3, "model")],
    ids=["pp", "pp+sd-ngram-k3", "pp+sd-ngram-auto", "pp+sd-draft-k3"],
)
def test_a_conversation_on_resident_streams_answers_as_cold_runs_do(
    tiny_export: Callable[..., Path], k: int | str, draft: str | None
) -> None:
    export = tiny_export(2)
    source = None if draft is None else (NGRAM if draft == "ngram" else tiny_export(1, draft=0.003))
    config = GenerationConfig(max_new_tokens=N_NEW, k=k)  # type: ignore[arg-type]
    cold = _run(export, config, reuse=False, draft=source)
    warm = _run(export, config, reuse=True, draft=source)
    assert [r.token_ids for r in warm] == [r.token_ids for r in cold]
    assert all(r.cached_tokens == 0 for r in cold)
    assert warm[0].cached_tokens == 0
    # each later turn takes the earlier turn's stream: its prompt and all but the answer's last
    # token (never fed) are in the caches
    for before, after in itertools.pairwise(warm):
        assert after.cached_tokens >= before.prompt_tokens, (before, after)
        assert after.stream_id == warm[0].stream_id


@pytest.mark.slow
@pytest.mark.parametrize("edit_at", [2, 3])
def test_an_edited_message_starts_from_the_shorter_prefix(
    tiny_export: Callable[..., Path], edit_at: int
) -> None:
    """An edited message, early (turn 2) or late (turn 3) in the history, starts a new stream
    from a copy of the prefix before the edit, whose later turns continue it."""
    export = tiny_export(2)
    config = GenerationConfig(max_new_tokens=N_NEW)
    cold = _run(export, config, reuse=False, edit_at=edit_at)
    warm = _run(export, config, reuse=True, edit_at=edit_at)
    assert [r.token_ids for r in warm] == [r.token_ids for r in cold]
    edited = warm[edit_at]
    assert 16 <= edited.cached_tokens < warm[edit_at - 1].prompt_tokens  # up to the edit only
    assert edited.stream_id != warm[0].stream_id
    for before, after in itertools.pairwise(warm[edit_at:]):
        assert after.cached_tokens >= before.prompt_tokens


@pytest.mark.slow
def test_a_stop_string_end_and_compaction_keep_answers_exact(
    tiny_export: Callable[..., Path],
) -> None:
    """A stop string ends a reply while the decode run may have run ahead: the next request
    keeps only what was fed and compacts; with a tiny compaction threshold, masked entries are
    dropped every turn too."""
    export = tiny_export(2)

    async def main(reuse: bool) -> list[tuple[list[int], FinishReason, int]]:
        pipe = pipeline(export, kv_reuse=reuse)
        pipe.compaction = type(pipe.compaction)(waste_fraction=0.0, min_masked=1)
        first = await pipe.complete(TURNS[0], GenerationConfig(max_new_tokens=N_NEW))
        stop = first.text[len(first.text) // 2 :][:3]  # a piece of what it will write again
        try:
            out = []
            prompt = TURNS[0]
            for line in TURNS[1:]:
                result = await pipe.complete(
                    prompt, GenerationConfig(max_new_tokens=N_NEW, stop=(stop,))
                )
                out.append((result.token_ids, result.finish_reason, result.cached_tokens))
                prompt += result.text + line
            return out
        finally:
            await pipe.close()

    warm, cold = asyncio.run(main(True)), asyncio.run(main(False))
    assert [ids for ids, _, _ in warm] == [ids for ids, _, _ in cold]
    assert warm[0][1] == FinishReason.STOP  # the same prompt again: it stops mid-answer
    assert all(cached > 0 for _, _, cached in warm)  # every turn continued a resident stream


@pytest.mark.slow
def test_interleaved_conversations_each_keep_their_own_stream(
    tiny_export: Callable[..., Path],
) -> None:
    """PP+MB: two conversations at once, turn by turn, on one pipeline; each continues its own
    stream and answers as when run cold."""
    export = tiny_export(2)
    config = GenerationConfig(max_new_tokens=N_NEW)
    heads = (TURNS[0], "Once upon a time the old lighthouse keeper climbed the stairs to the lamp")

    async def main(reuse: bool) -> list[list[GenerationResult]]:
        pipe = pipeline(export, kv_reuse=reuse)
        pipe.streams.set(2)
        prompts = list(heads)
        out: list[list[GenerationResult]] = [[], []]
        try:
            for line in TURNS[1:]:
                results = await asyncio.gather(*(pipe.complete(p, config) for p in prompts))
                for i, result in enumerate(results):
                    out[i].append(result)
                    prompts[i] += result.text + line
            return out
        finally:
            await pipe.close()

    cold, warm = asyncio.run(main(False)), asyncio.run(main(True))
    for conversation_cold, conversation_warm in zip(cold, warm, strict=True):
        assert [r.token_ids for r in conversation_warm] == [r.token_ids for r in conversation_cold]
        ids = {r.stream_id for r in conversation_warm}
        assert len(ids) == 1  # one stream for the whole conversation
        assert all(r.cached_tokens > 0 for r in conversation_warm[1:])
    assert {r.stream_id for r in warm[0]} != {r.stream_id for r in warm[1]}


@pytest.mark.slow
def test_finished_streams_stay_until_the_budget_evicts_them(
    tiny_export: Callable[..., Path],
) -> None:
    export = tiny_export(2)

    async def main() -> tuple[list[int], list[int], bool]:
        pipe = pipeline(export, kv_budget_tokens=60)
        try:
            for head in ("alpha beta gamma delta", "one two three four", "red green blue"):
                result = await pipe.complete(head, GenerationConfig(max_new_tokens=N_NEW))
                assert result.finish_reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
            stages = pipe.route.stages  # type: ignore[attr-defined]
            held = sorted(stages[0].stream_ids())
            assert pipe.resident is not None
            idle = [p.stream_id for p in pipe.resident.idle()]
            await pipe.set_resident(None)
            return held, idle, any(stage.stream_ids() for stage in stages)
        finally:
            await pipe.close()

    held, idle, left = asyncio.run(main())
    assert held == sorted(idle) and 1 <= len(idle) < 3  # the oldest went for the budget
    assert not left  # turning reuse off frees the idle streams on every stage
