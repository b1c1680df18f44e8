"""Conversations that stay on the fleet: an 8-turn conversation whose turns continue their
resident stream on real workers answers token for token as the same conversation run cold on
this PC (f32, greedy), in PP, PP+MB (two conversations at once, one editing an earlier
message) and PP+SD (n-gram drafts, a draft model), and when a worker is killed between two turns
or in the middle of one: the conversation is replayed into the new ring where its KV was lost."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_support import fast_coordinator
from runtime_support import pipeline

from fleetgui.assembler import aopen
from fleetgui.fleet.local_fleet.worker_process import LocalWorker
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.draft_source import NGRAM
from fleetgui.runtime.generation import GenerationResult, TokenDelta
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

pytestmark = pytest.mark.slow

OPENING = (
    "You are a helpful assistant who writes Python code for people.\ndef add(a, b):\n    return"
)
LINES = (
    " and now multiply them",
    " then divide, checking for zero",
    " print the results",
    " add a docstring",
    " and type hints",
    " now test it",
    " finally, explain it",
)
N_NEW = 10
Kill = Callable[[int, int], None]  # (turn, tokens seen so far in it): kill a worker now


def _prompts_of(answers: list[str]) -> str:
    return OPENING + "".join(a + line for a, line in zip(answers, LINES, strict=False))


async def _talk(
    stream: Callable[..., object], config: GenerationConfig, kill: Kill | None
) -> list[GenerationResult]:
    """Eight turns, each the history so far plus a new line; ``kill(turn, seen)`` is called
    after every piece of an answer and before every turn (``seen`` -1)."""
    results: list[GenerationResult] = []
    for turn in range(len(LINES) + 1):
        prompt = _prompts_of([r.text for r in results])
        if kill is not None:
            kill(turn, -1)
        seen, result = 0, None
        async for item in stream(prompt, config):  # type: ignore[attr-defined]
            if isinstance(item, TokenDelta):
                seen += 1
                if kill is not None:
                    kill(turn, seen)
            else:
                result = item
        assert isinstance(result, GenerationResult)
        results.append(result)
    return results


def _cold(export: Path, config: GenerationConfig, draft: Path | str | None) -> list[list[int]]:
    async def main() -> list[list[int]]:
        local = pipeline(export, draft=draft, kv_reuse=False)  # type: ignore[arg-type]
        try:
            return [r.token_ids for r in await _talk(local.stream, config, None)]
        finally:
            await local.close()

    return asyncio.run(main())


def _on_fleet(
    export: Path,
    workers: list[LocalWorker],
    identity: KeyPair,
    config: GenerationConfig,
    *,
    draft: Path | str | None = None,
    kill: Kill | None = None,
) -> tuple[list[GenerationResult], list[str]]:
    """The conversation with this PC's stage 0 and the workers' stages, reuse on; and the
    workers lost on the way."""

    async def main() -> tuple[list[GenerationResult], list[str]]:
        coordinator = replace(fast_coordinator(), worker_precision="f32")
        llm = await aopen(
            export,
            workers=[w.endpoint for w in workers],
            draft=draft,
            identity=identity,
            coordinator=coordinator,
        )
        try:
            results = await _talk(llm.astream_result, config, kill)
            return results, list(llm.sessions[0].failover.failovers)
        finally:
            await llm.aclose(unload=True)

    return asyncio.run(main())


def _assert_kept(results: list[GenerationResult]) -> None:
    """Every turn after the first continued the conversation's one stream, its history kept."""
    assert len({r.stream_id for r in results}) == 1
    for before, after in itertools.pairwise(results):
        assert after.cached_tokens >= before.prompt_tokens - 1, (before, after)


@pytest.mark.parametrize(
    ("k", "draft"), [("off", None), (3, "ngram"), (3, "model")], ids=["pp", "sd-ngram", "sd-draft"]
)
def test_eight_turns_on_the_fleet_answer_as_cold_runs(
    tiny_export: Callable[..., Path],
    start_workers: Callable[..., list[LocalWorker]],
    identity: KeyPair,
    k: int | str,
    draft: str | None,
) -> None:
    export = tiny_export(3)
    source = None if draft is None else (NGRAM if draft == "ngram" else tiny_export(1, draft=0.003))
    config = GenerationConfig(max_new_tokens=N_NEW, k=k)  # type: ignore[arg-type]
    workers = start_workers(f"a-{k}-{draft}", f"b-{k}-{draft}")
    results, lost = _on_fleet(export, workers, identity, config, draft=source)
    assert [r.token_ids for r in results] == _cold(export, config, source)
    assert lost == []
    _assert_kept(results)


@pytest.mark.parametrize("when", ["between", "during"])
def test_a_worker_killed_between_or_during_turns_leaves_the_answers_exact(
    tiny_export: Callable[..., Path],
    start_workers: Callable[..., list[LocalWorker]],
    identity: KeyPair,
    when: str,
) -> None:
    """Worker b (stage 2) dies before turn 4, or after 3 pieces of turn 4's answer; its stage
    moves to a or this PC, the conversation's passes are replayed there, and every answer,
    that one and the next ones, is the cold run's."""
    export = tiny_export(3)
    config = GenerationConfig(max_new_tokens=N_NEW)
    a, b = start_workers(f"a-{when}", f"b-{when}")

    def kill(turn: int, seen: int) -> None:
        if turn == 4 and seen == (-1 if when == "between" else 3) and b.process is not None:
            b.kill()

    results, lost = _on_fleet(export, [a, b], identity, config, kill=kill)
    assert lost == [b.name]
    assert [r.token_ids for r in results] == _cold(export, config, None)
    _assert_kept(results)  # the stream lived on: replayed, not prefilled anew


STORY = (
    "Once upon a time, in a small village by the sea, the old lighthouse keeper climbed the "
    "stairs to the lamp every evening."
)
EDITED = STORY.replace("every evening", "every night")


async def _two_at_once(
    complete: Callable[..., object], config: GenerationConfig
) -> list[list[GenerationResult]]:
    """Two conversations turn by turn, both generating at once; at turn 5 the second resends
    its history with its first message edited (a shorter common prefix)."""
    prompts = [OPENING, STORY]
    results: list[list[GenerationResult]] = [[], []]
    for turn, line in enumerate(LINES[:6]):
        if turn == 5:
            prompts[1] = prompts[1].replace(STORY, EDITED)
        answers = await asyncio.gather(*(complete(p, config) for p in prompts))  # type: ignore[misc]
        for i, result in enumerate(answers):
            results[i].append(result)
            prompts[i] += result.text + line
    return results


def test_two_conversations_at_once_and_an_edited_message_on_the_fleet(
    tiny_export: Callable[..., Path],
    start_workers: Callable[..., list[LocalWorker]],
    identity: KeyPair,
) -> None:
    """PP+MB on real workers: two conversations interleaved across the stages keep their own
    streams, and an edited earlier message rewinds to the shorter prefix; every answer is the
    cold run's."""
    export = tiny_export(3)
    config = GenerationConfig(max_new_tokens=N_NEW)
    workers = start_workers("a-mb", "b-mb")

    async def cold() -> list[list[GenerationResult]]:
        local = pipeline(export, kv_reuse=False)
        local.streams.set(2)
        try:
            return await _two_at_once(local.complete, config)
        finally:
            await local.close()

    async def warm() -> list[list[GenerationResult]]:
        llm = await aopen(
            export,
            workers=[w.endpoint for w in workers],
            identity=identity,
            max_streams=2,
            coordinator=replace(fast_coordinator(), worker_precision="f32"),
        )
        try:
            return await _two_at_once(llm.agenerate_result, config)
        finally:
            await llm.aclose(unload=True)

    on_fleet, expected = asyncio.run(warm()), asyncio.run(cold())
    for got, want in zip(on_fleet, expected, strict=True):
        assert [r.token_ids for r in got] == [r.token_ids for r in want]
    first, second = on_fleet
    _assert_kept(first)
    _assert_kept(second[:5])
    edited = second[5]
    assert 16 <= edited.cached_tokens < second[4].prompt_tokens  # rewound, not recomputed
    assert first[0].stream_id != second[0].stream_id


SYSTEM = (
    "You are a careful assistant for a team of Python developers. Answer with short, correct "
    "code and one sentence of explanation. Prefer the standard library. "
)
QUESTIONS = ("def add(a, b):", "def mul(a, b):", "def div(a, b):", "def sub(a, b):")


@pytest.mark.parametrize("kill", [False, True], ids=["", "worker-killed"])
def test_conversations_sharing_a_system_prompt_start_from_a_copy(
    tiny_export: Callable[..., Path],
    start_workers: Callable[..., list[LocalWorker]],
    identity: KeyPair,
    kill: bool,
) -> None:
    """Four conversations open with one system prompt, then each has a second turn. Each new
    one starts from a copy of the system prompt's KV on every stage (the conversations before
    it keep theirs: each second turn continues its own stream), also when worker b dies after
    the second conversation; every answer is the cold run's."""
    export = tiny_export(3)
    config = GenerationConfig(max_new_tokens=N_NEW)
    a, b = start_workers(f"a-sys-{kill}", f"b-sys-{kill}")

    async def talk(complete: Callable[..., object]) -> list[GenerationResult]:
        results = []
        for i, question in enumerate(QUESTIONS):
            if kill and i == 2 and b.process is not None:
                b.kill()
            results.append(await complete(SYSTEM + question, config))  # type: ignore[misc]
        for question, first in zip(QUESTIONS, list(results), strict=True):
            again = SYSTEM + question + first.text + " and test it"
            results.append(await complete(again, config))  # type: ignore[misc]
        return results

    async def cold() -> list[GenerationResult]:
        local = pipeline(export, kv_reuse=False)
        try:
            return await talk(local.complete)
        finally:
            await local.close()

    async def warm() -> tuple[list[GenerationResult], int]:
        llm = await aopen(
            export,
            workers=[a.endpoint, b.endpoint],
            identity=identity,
            coordinator=replace(fast_coordinator(), worker_precision="f32"),
        )
        try:
            results = await talk(llm.agenerate_result)
            return results, llm.runtime.forks  # type: ignore[attr-defined]
        finally:
            await llm.aclose(unload=True)

    (results, forks), expected = asyncio.run(warm()), asyncio.run(cold())
    assert [r.token_ids for r in results] == [r.token_ids for r in expected]
    firsts, seconds = results[:4], results[4:]
    assert len({r.stream_id for r in firsts}) == 4  # a copy each, not another's stream
    assert [s.stream_id for s in seconds] == [f.stream_id for f in firsts]
    # the system prompt's tokens, but its last (the question may start inside it)
    system_tokens = len(Tokenizer(tokenizer_dir_of(export)).encode(SYSTEM)) - 1
    if not kill:
        assert forks == 3
        assert all(r.cached_tokens >= system_tokens for r in firsts[1:])
    else:  # the copy made once the ring is rebuilt works again
        assert forks >= 1 and firsts[3].cached_tokens >= system_tokens
    for first, second in zip(firsts, seconds, strict=True):
        assert second.cached_tokens >= first.prompt_tokens
