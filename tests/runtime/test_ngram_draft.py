"""The draft-free n-gram drafter (prompt lookup decoding): its proposals, its one-hot draft
distributions under speculative sampling, and PP+SD / PP+SD+MB with ``--draft ngram`` on real
tiny exports, in process, through the CLI and on real worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fleet_support import WorkerProcess
from runtime_support import EXACT, export, pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.draft_source import NGRAM, draft_label, parse_draft
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.head import SparseDist
from fleetgui.runtime.metrics import MetricEvent, SpeculationRound
from fleetgui.runtime.ngram_draft import NgramDraft, NgramIndex
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.verification import verify_sampling

GREEDY = GenerationConfig()
N_NEW = 48
# prompts the tiny demo target (trained on Python source) continues with text it repeats
CODE_PROMPTS = (
    "def add(a, b):\n    return a + b\n\ndef add(",
    "import os\nimport sys\nimport os\nimport",
    "class A:\n    def __init__(self, x):\n        self.x = x\n",
)


def _proposal(tokens: list[int], k: int) -> list[int]:
    return NgramDraft().proposal(1, tokens, k, greedy=True).drafts


def _reference_proposal(tokens: list[int], k: int, max_n: int = 4) -> list[int]:
    """Prompt lookup by brute force: the longest suffix n-gram's most recent earlier
    occurrence, its continuation copied on (overlapping) from there."""
    for n in range(min(max_n, len(tokens) - 1), 0, -1):
        suffix = tokens[len(tokens) - n :]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                out = list(tokens)
                for i in range(k):
                    out.append(out[start + n + i])
                return out[len(tokens) :]
    return []


# -- the drafter's proposals --------------------------------------------------------------------


def test_a_repeated_text_gets_its_continuation_proposed() -> None:
    # "the cat sat on the mat . the cat" -> the last "the cat" was followed by "sat on the mat"
    the, cat, sat, on, mat, dot = 10, 11, 12, 13, 14, 15
    text = [the, cat, sat, on, the, mat, dot, the, cat]
    assert _proposal(text, 4) == [sat, on, the, mat]
    assert _proposal(text, 2) == [sat, on]


def test_no_match_proposes_nothing() -> None:
    assert _proposal([5, 6, 7, 8, 9], 4) == []
    assert _proposal([5], 4) == []
    draft = NgramDraft()
    assert not draft.predictable(1, [5, 6, 7, 8, 9])


def test_the_longest_match_wins_over_a_more_recent_shorter_one() -> None:
    # suffix 1 2 3: "1 2 3" occurred at the start (followed by 40); "3" alone more recently
    # (followed by 50): the 3-gram's continuation is proposed
    text = [1, 2, 3, 40, 41, 9, 3, 50, 51, 1, 2, 3]
    assert _proposal(text, 2) == [40, 41]
    # among occurrences of the same n-gram the most recent one wins
    text = [7, 8, 1, 7, 8, 2, 7, 8]
    assert _proposal(text, 1) == [2]


def test_periodic_text_gets_all_k_drafts() -> None:
    """A continuation that runs into the context's end goes on copying itself: "a b c a b"
    continues "c a b c a b ..." for as many drafts as asked."""
    a, b, c = 1, 2, 3
    assert _proposal([a, b, c, a, b], 7) == [c, a, b, c, a, b, c]
    assert _proposal([a, a, a], 5) == [a] * 5


def test_the_incremental_index_proposes_what_a_full_scan_would() -> None:
    rng = np.random.default_rng(4)
    draft = NgramDraft()
    tokens: list[int] = []
    for step in range(600):
        tokens.append(int(rng.integers(0, 6 if step < 300 else 12)))  # many matches, then fewer
        k = int(rng.integers(1, 9))
        assert draft.proposal(3, tokens, k, greedy=True).drafts == _reference_proposal(tokens, k), (
            step
        )


def test_a_long_context_costs_no_scan_per_token() -> None:
    """20 000 tokens fed and looked up one at a time: an index that scanned the context per
    token would take minutes here."""
    rng = np.random.default_rng(0)
    draft = NgramDraft()
    committed: list[int] = []
    proposed = 0
    started = time.perf_counter()
    for token in rng.integers(0, 50, size=20_000):
        committed.append(int(token))  # the stream's list grows in place, as the pipeline's
        proposed += len(draft.proposal(1, committed, 4, greedy=True).drafts)
    elapsed = time.perf_counter() - started
    assert elapsed < 5.0, elapsed
    assert proposed > 0.9 * 4 * 20_000  # a 50-token alphabet: nearly every step matches


def test_the_index_rebuilds_for_a_stream_it_does_not_hold() -> None:
    index = NgramIndex()
    index.sync([1, 2, 3, 1, 2])
    index.sync([9, 9, 9])  # not an extension of what it holds
    assert index.tokens == [9, 9, 9]
    assert index.propose(2) == ([9, 9], 2)


def test_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="min_n <= max_n"):
        NgramDraft(max_n=2, min_n=3)


def test_predictable_means_a_match_of_the_longest_n() -> None:
    draft = NgramDraft()
    assert not draft.predictable(1, [1, 2, 3, 9, 2, 3])  # a 2-gram match only
    assert draft.predictable(1, [1, 2, 3, 4, 9, 1, 2, 3, 4])


def test_streams_are_separate_and_released() -> None:
    draft = NgramDraft()

    async def main() -> None:
        await draft.prefill(1, [1, 2, 1])
        await draft.prefill(2, [5, 6, 5])
        one = await draft.propose(1, [1, 2, 1], 2, GREEDY, np.random.default_rng(0))
        two = await draft.propose(2, [5, 6, 5], 2, GREEDY, np.random.default_rng(0))
        assert (one.drafts, two.drafts) == ([2, 1], [6, 5])
        await draft.release(1)
        assert 1 not in draft._index and 2 in draft._index
        await draft.close()
        assert not draft._index

    asyncio.run(main())


def test_draft_sources_parse() -> None:
    assert parse_draft("ngram") == NGRAM == parse_draft(" NGram ")
    assert parse_draft("ngram/") == Path("ngram")
    assert parse_draft("/exports/draft") == Path("/exports/draft")
    assert draft_label(NGRAM) == "n-gram (no draft model)"
    assert draft_label(Path("/exports/draft-1s")) == "draft-1s"


# -- sampled mode: a one-hot draft distribution -------------------------------------------------


def test_sampled_proposals_carry_one_hot_distributions() -> None:
    proposal = NgramDraft().proposal(1, [1, 2, 3, 1, 2], 3, greedy=False)
    assert proposal.drafts == [3, 1, 2]
    for token, dist in zip(proposal.drafts, proposal.dists, strict=True):
        assert dist.prob_of(token) == 1.0 and len(dist) == 1


def test_verifying_a_one_hot_draft_keeps_the_target_distribution() -> None:
    """Speculative sampling with q one-hot at the draft d: the first emitted token is still
    distributed as the target's p (d with p(d), any other x with p(x)), for a good guess and a
    bad one, and the second position is reached exactly when d was accepted."""
    p = np.array([[0.5, 0.2, 0.15, 0.1, 0.05], [0.1, 0.1, 0.6, 0.1, 0.1]])
    rng = np.random.default_rng(7)
    n = 20_000
    for draft in (0, 4):
        first = np.zeros(5)
        reached = 0
        one_hot = SparseDist(np.array([draft], dtype=np.int32), np.ones(1))
        for _ in range(n):
            accepted, tokens = verify_sampling(
                p, [draft], [one_hot], [float(rng.random())], float(rng.random())
            )
            first[tokens[0]] += 1
            reached += accepted
        assert np.allclose(first / n, p[0], atol=0.015), (draft, first / n)
        assert reached / n == pytest.approx(p[0, draft], abs=0.015)


# -- PP+SD with --draft ngram on real exports -------------------------------------------------


@pytest.fixture(scope="module")
def demo_exports(demo_pair_tiny: Path, root: Path) -> dict[str, Path]:
    """The tiny demo target (a small Llama trained on Python source: its continuations repeat
    themselves, as code does; 2 layers) in 2 stages, fp32."""
    return {"2": export(demo_pair_tiny / "target", root / "demo-2s", stages=2)}


def _plain(export_dir: Path, prompts: tuple[str, ...]) -> dict[str, list[int]]:
    async def main() -> dict[str, list[int]]:
        pipe = pipeline(export_dir)
        try:
            options = GenerationConfig(max_new_tokens=N_NEW)
            return {p: (await pipe.complete(p, options)).token_ids for p in prompts}
        finally:
            await pipe.close()

    return asyncio.run(main())


@pytest.mark.slow
def test_pp_sd_with_ngram_is_exact_and_accepts_on_repetitive_text(
    demo_exports: dict[str, Path],
) -> None:
    references = _plain(demo_exports["2"], CODE_PROMPTS)
    rounds: list[MetricEvent] = []

    async def main() -> dict[tuple[int | str, str], GenerationResult]:
        pipe = pipeline(demo_exports["2"], draft=NGRAM)
        pipe.metrics.subscribe(rounds.append)
        out = {}
        try:
            for k in (1, 3, 8, "auto"):
                options = GenerationConfig(max_new_tokens=N_NEW, k=k)
                for prompt in CODE_PROMPTS:
                    out[k, prompt] = await pipe.complete(prompt, options)
        finally:
            await pipe.close()
        return out

    results = asyncio.run(main())
    for (k, prompt), result in results.items():
        assert result.token_ids == references[prompt], (k, prompt)
        assert result.acceptance_rate is not None and result.acceptance_rate > 0.2, (k, prompt)
        if isinstance(k, int):
            assert max(result.ks) <= k
    speculation = [e for e in rounds if isinstance(e, SpeculationRound)]
    assert any(e.accepted == e.k for e in speculation)  # whole proposals accepted...
    assert any(e.accepted < e.k for e in speculation)  # ...and rejected ones rewound


@pytest.mark.slow
def test_pp_sd_mb_three_streams_with_ngram_are_exact(demo_exports: dict[str, Path]) -> None:
    references = _plain(demo_exports["2"], CODE_PROMPTS)

    async def main() -> list[GenerationResult]:
        pipe = pipeline(demo_exports["2"], draft=NGRAM)
        try:
            return await asyncio.gather(
                *(
                    pipe.complete(p, GenerationConfig(max_new_tokens=N_NEW, k="auto"))
                    for p in CODE_PROMPTS
                )
            )
        finally:
            await pipe.close()

    results = asyncio.run(main())
    for prompt, result in zip(CODE_PROMPTS, results, strict=True):
        assert result.token_ids == references[prompt], prompt
        assert result.acceptance_rate is not None and result.acceptance_rate > 0


@pytest.mark.slow
def test_k_auto_turns_ngram_speculation_off_on_text_that_never_repeats(
    tiny_export: Callable[..., Path],
) -> None:
    """On a random model's text n-grams rarely agree: most steps become plain decoding steps,
    and the tokens stay the target's own, alone and with 3 streams."""
    random_export = tiny_export(2)
    prompts = ("def add(a, b):\n    return", "The old lighthouse keeper", "import os")
    references = _plain(random_export, prompts)

    async def main() -> tuple[list[GenerationResult], list[GenerationResult]]:
        pipe = pipeline(random_export, draft=NGRAM)
        options = GenerationConfig(max_new_tokens=N_NEW, k="auto")
        try:
            alone = [await pipe.complete(p, options) for p in prompts]
            together = await asyncio.gather(*(pipe.complete(p, options) for p in prompts))
        finally:
            await pipe.close()
        return alone, list(together)

    alone, together = asyncio.run(main())
    for result in (*alone, *together):
        assert result.token_ids == references[result.prompt], result.prompt
    assert sum(r.plain_steps for r in alone) > 2 * sum(len(r.ks) for r in alone), [
        (r.ks, r.plain_steps) for r in alone
    ]


@pytest.mark.slow
def test_sampled_pp_sd_with_ngram_replays_with_its_seed(demo_exports: dict[str, Path]) -> None:
    options = GenerationConfig(max_new_tokens=N_NEW, temperature=0.8, top_p=0.95, seed=11, k=4)

    async def main() -> list[GenerationResult]:
        pipe = pipeline(demo_exports["2"], draft=NGRAM)
        try:
            return [await pipe.complete(CODE_PROMPTS[0], options) for _ in range(2)]
        finally:
            await pipe.close()

    first, again = asyncio.run(main())
    assert first.token_ids == again.token_ids
    assert len(first.token_ids) == N_NEW
    assert first.acceptance_rate is not None and first.acceptance_rate > 0


# -- the CLI and the fleet ----------------------------------------------------------------------


def _generate_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEETGUI_HOME": str(home)}
    command = [sys.executable, "-m", "fleetgui", "--log-level", "warning", "generate", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.mark.slow
def test_generate_cli_pp_sd_with_draft_ngram(demo_exports: dict[str, Path], root: Path) -> None:
    prompt = CODE_PROMPTS[0]
    reference = _plain(demo_exports["2"], (prompt,))[prompt]
    run = _generate_cli(
        root / "cli-home",
        str(demo_exports["2"]),
        "--prompt",
        prompt,
        "--max-new-tokens",
        str(N_NEW),
        "--mode",
        "pp+sd",
        "--draft",
        "ngram",
        "--precision",
        "f32",
        "--threads",
        "1",
        "--json",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(run.stdout.splitlines()[0])
    assert record["token_ids"] == reference
    assert record["acceptance_rate"] > 0
    assert record["ks"] and record["plain_steps"] >= 0

    missing = _generate_cli(root / "cli-home", str(demo_exports["2"]), "--prompt", "x",
                            "--mode", "pp+sd")  # fmt: skip
    assert missing.returncode != 0 and "--draft ngram" in missing.stderr


@pytest.mark.slow
def test_ngram_on_real_workers_is_exact(
    demo_exports: dict[str, Path], live_workers: list[WorkerProcess], identity: KeyPair
) -> None:
    """Both stages on two worker processes on loopback (CURVE on), the n-gram drafter on the
    coordinator (as the demo runs): PP+SD and PP+SD+MB give the plain tokens, and a sampled
    request (one-hot draft distributions on the wire) the tokens it gives in process."""
    from fleetgui.fleet.session.config import CoordinatorConfig
    from fleetgui.fleet.session.session import FleetSession

    references = _plain(demo_exports["2"], CODE_PROMPTS)
    sampled = GenerationConfig(max_new_tokens=N_NEW, temperature=0.8, top_p=0.95, seed=11, k=4)

    async def in_process() -> list[int]:
        pipe = pipeline(demo_exports["2"], draft=NGRAM)
        try:
            return (await pipe.complete(CODE_PROMPTS[0], sampled)).token_ids
        finally:
            await pipe.close()

    sampled_reference = asyncio.run(in_process())

    async def main(
        endpoints: list,
    ) -> tuple[GenerationResult, list[GenerationResult], GenerationResult]:
        session = FleetSession(identity, CoordinatorConfig(local_stages=0, local=EXACT))
        try:
            await session.connect(endpoints)
            await session.deploy(demo_exports["2"])
            pipe: Pipeline = session.pipeline(draft_dir=NGRAM)
            options = GenerationConfig(max_new_tokens=N_NEW, k="auto")
            alone = await pipe.complete(CODE_PROMPTS[0], options)
            together = await asyncio.gather(*(pipe.complete(p, options) for p in CODE_PROMPTS))
            return alone, list(together), await pipe.complete(CODE_PROMPTS[0], sampled)
        finally:
            await session.close()

    endpoints = [w.endpoint for w in live_workers[:2]]
    alone, together, sampled_result = asyncio.run(main(endpoints))
    assert sampled_result.token_ids == sampled_reference
    assert sampled_result.ks  # rounds ran: their one-hot distributions crossed the wire
    assert alone.token_ids == references[CODE_PROMPTS[0]]
    assert alone.acceptance_rate is not None and alone.acceptance_rate > 0
    for prompt, result in zip(CODE_PROMPTS, together, strict=True):
        assert result.token_ids == references[prompt], prompt
