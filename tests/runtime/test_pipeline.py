"""Pipeline API behaviour beyond greedy exactness: sampling, errors, metrics, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import pipeline
from scipy.stats import chi2_contingency

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.generation import GenerationError
from fleetgui.runtime.metrics import (
    AggregateThroughput,
    RequestFinished,
    SpeculationRound,
    StageTiming,
)
from fleetgui.runtime.target_passes import SHARED_PREFILL_CHUNK

pytestmark = pytest.mark.slow


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_same_seed_same_text_and_other_seed_differs(tiny_exports_2s_draft: dict[str, Path]) -> None:
    async def main() -> list[list[int]]:
        pipe = pipeline(tiny_exports_2s_draft["2s"], draft=tiny_exports_2s_draft["draft"])
        out = []
        try:
            for seed, speculative in (
                (11, False),
                (11, False),
                (12, False),
                (11, True),
                (11, True),
            ):
                options = GenerationConfig(
                    max_new_tokens=24,
                    temperature=1.0,
                    top_p=0.95,
                    seed=seed,
                    k=3 if speculative else "off",
                )
                out.append((await pipe.complete("Once upon a time", options)).token_ids)
        finally:
            await pipe.close()
        return out

    plain_a, plain_b, plain_other, spec_a, spec_b = run(main())
    assert plain_a == plain_b
    assert plain_a != plain_other
    assert spec_a == spec_b


def test_speculative_sampling_keeps_the_target_distribution(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    """The first two sampled tokens' joint distribution is the same with and without the draft
    (two-sample chi-square on many seeds); a draft that is nothing like the target is rejected
    often but must not bias the output."""
    n = 300
    params = {"temperature": 0.8, "top_k": 3}

    async def main() -> tuple[Counter[tuple[int, ...]], Counter[tuple[int, ...]], float]:
        pipe = pipeline(tiny_exports_2s_draft["2s"], draft=tiny_exports_2s_draft["draft"])
        plain: Counter[tuple[int, ...]] = Counter()
        spec: Counter[tuple[int, ...]] = Counter()
        accepted = []
        try:
            for seed in range(n):
                for speculative, counter in ((False, plain), (True, spec)):
                    options = GenerationConfig(
                        max_new_tokens=3, seed=seed, **params, k=(2 if speculative else "off")
                    )
                    result = await pipe.complete("The harbour", options)
                    counter[tuple(result.token_ids[:3])] += 1
                    if speculative and result.acceptance_rate is not None:
                        accepted.append(result.acceptance_rate)
        finally:
            await pipe.close()
        return plain, spec, sum(accepted) / len(accepted)

    plain, spec, acceptance = run(main())
    keys = [k for k in set(plain) | set(spec) if plain[k] + spec[k] >= 10]
    other_plain = n - sum(plain[k] for k in keys)
    other_spec = n - sum(spec[k] for k in keys)
    table = [[plain[k] for k in keys] + [other_plain], [spec[k] for k in keys] + [other_spec]]
    _, p_value, _, _ = chi2_contingency(table)
    assert p_value > 1e-3, (p_value, table)
    assert 0.05 < acceptance < 0.95, acceptance  # both accept and reject paths ran


@pytest.mark.parametrize(
    ("prompt", "options", "message"),
    [
        ("", GenerationConfig(), "prompt is empty"),
        ("   ", GenerationConfig(), "prompt is empty"),
        ("x " * 200, GenerationConfig(), "shorten it"),
        ("hello", GenerationConfig(k=17), "between 1 and 16"),
        ("hello", GenerationConfig(k=0), "between 1 and 16"),
        ("hello", GenerationConfig(max_new_tokens=0), "at least 1"),
    ],
)
def test_bad_requests_are_clear_errors(
    tiny_exports_2s_draft: dict[str, Path], prompt: str, options: GenerationConfig, message: str
) -> None:
    async def main() -> None:
        pipe = pipeline(
            tiny_exports_2s_draft["2s"], draft=tiny_exports_2s_draft["draft"], context_limit=64
        )
        try:
            with pytest.raises(GenerationError, match=message):
                await pipe.complete(prompt, options)
            # the pipeline still serves after a refused request
            ok = await pipe.complete("hello", GenerationConfig(max_new_tokens=4))
            assert len(ok.token_ids) == 4
        finally:
            await pipe.close()

    run(main())


def test_speculative_without_draft_is_refused(tiny_exports_2s_draft: dict[str, Path]) -> None:
    async def main() -> None:
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        try:
            with pytest.raises(GenerationError, match="needs a draft model"):
                await pipe.complete("hi", GenerationConfig(k="auto"))
        finally:
            await pipe.close()

    run(main())


def test_draft_with_another_vocabulary_is_refused(
    tiny_exports_2s_draft: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from fleetgui.errors import FleetguiError

    draft = tmp_path / "draft"
    shutil.copytree(tiny_exports_2s_draft["draft"], draft)
    tokenizer_json = draft / "tokenizer" / "tokenizer.json"
    data = json.loads(tokenizer_json.read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    tokenizer_json.write_text(json.dumps(data))
    with pytest.raises(FleetguiError, match="different tokenizer or vocabulary"):
        pipeline(tiny_exports_2s_draft["2s"], draft=draft)


def test_metrics_events_are_emitted(tiny_exports_2s_draft: dict[str, Path]) -> None:
    events: list[object] = []

    async def main() -> None:
        pipe = pipeline(tiny_exports_2s_draft["2s"], draft=tiny_exports_2s_draft["draft"])
        pipe.metrics.subscribe(events.append)
        try:
            await pipe.complete("def f(x):", GenerationConfig(max_new_tokens=12, k="auto"))
        finally:
            await pipe.close()

    run(main())
    stages = {e.stage for e in events if isinstance(e, StageTiming)}
    assert stages == {0, 1}
    rounds = [e for e in events if isinstance(e, SpeculationRound)]
    assert rounds and all(1 <= r.k <= 16 and 0 <= r.accepted <= r.k for r in rounds)
    rates = [e for e in events if isinstance(e, AggregateThroughput)]
    assert rates and all(r.tokens_per_s > 0 and r.active_streams == 1 for r in rates)
    finished = [e for e in events if isinstance(e, RequestFinished)]
    assert len(finished) == 1 and finished[0].new_tokens == 12
    assert finished[0].ttft_ms > 0 and finished[0].acceptance_rate is not None


def test_generate_cli_json(tiny_exports_2s_draft: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path / "home")}
    command = [
        sys.executable,
        "-m",
        "fleetgui",
        "--log-level",
        "warning",
        "generate",
        str(tiny_exports_2s_draft["2s"]),
        "--prompt",
        "def f(x):",
        "--prompt",
        "Once upon",
        "--max-new-tokens",
        "10",
        "--mode",
        "pp+sd+mb",
        "--draft",
        str(tiny_exports_2s_draft["draft"]),
        "--k",
        "auto",
        "--precision",
        "f32",
        "--json",
    ]
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3
    for record, prompt in zip(lines[:2], ("def f(x):", "Once upon"), strict=True):
        assert record["prompt"] == prompt
        assert len(record["token_ids"]) == 10
        assert isinstance(record["text"], str)
        assert record["ttft_ms"] > 0 and record["tokens_per_s"] > 0
        assert 0 <= record["acceptance_rate"] <= 1
    assert lines[2]["aggregate"] is True and lines[2]["tokens_per_s"] > 0

    bad = subprocess.run(
        [*command[:-1], "--k", "99"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert bad.returncode == 1
    assert "between 1 and 16" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("weights", "threads", "precision", "expected"),
    [
        ("fp16", 1, "auto", "f32"),
        ("fp32", 1, "auto", "f32"),
        ("int4", 1, "auto", "f32-dq"),
        ("int8", 2, "auto", "f32-dq"),
        ("int4", 1, "bf16", "bf16"),
        ("fp16", 2, "auto", "auto"),
        ("fp16", 1, "bf16", "bf16"),  # an explicit choice is kept
    ],
)
def test_what_auto_precision_means(
    weights: str, threads: int, precision: str, expected: str
) -> None:
    from fleetgui.runtime.loader import safe_stage_config
    from fleetgui.runtime.ov_stage import StageConfig

    config = StageConfig(threads=threads, precision=precision)
    resolved = safe_stage_config(config, weights)
    assert resolved.precision == expected
    props = resolved.ov_properties()
    if expected == "f32-dq":  # f32 compute, int8 activations, the KV cache's default type
        assert props["INFERENCE_PRECISION_HINT"] == "f32" and "KV_CACHE_PRECISION" not in props


def test_f32_dq_stage_runs_and_quantizes_activations(
    tmp_path: Path, tiny_models: Callable[..., Path]
) -> None:
    """An int4 stage compiled with auto precision computes in f32 with dynamic quantization;
    with ``f32`` asked for, without it (int8 activations round differently for different
    numbers of positions a pass, which breaks PP+SD's exactness at near-ties)."""
    import openvino as ov

    from fleetgui.export.exporter import ExportRequest, export_model
    from fleetgui.export.manifest import read_manifest
    from fleetgui.runtime.loader import safe_stage_config
    from fleetgui.runtime.ov_stage import StageConfig

    out = tmp_path / "int4"
    export_model(ExportRequest(tiny_models("llama"), out, stages=1, weights="int4"))
    manifest = read_manifest(out)
    config = safe_stage_config(StageConfig(threads=1), manifest.weight_format)
    compiled = ov.Core().compile_model(
        out / manifest.stages[0].model_file, "CPU", config.ov_properties()
    )
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    assert int(compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")) > 0
    exact = StageConfig(threads=1, precision="f32")
    assert safe_stage_config(exact, manifest.weight_format) == exact
    compiled = ov.Core().compile_model(
        out / manifest.stages[0].model_file, "CPU", exact.ov_properties()
    )
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    assert int(compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")) == 0


def test_a_prompt_beside_a_generating_stream_is_prefilled_in_small_passes(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    """Each of a generating stream's tokens waits for the pass ahead of it on a stage, so a
    new prompt goes in small passes while others generate, and in full ones alone."""
    events: list[object] = []
    prompt = " ".join(["alpha beta gamma"] * 25)

    async def main() -> tuple[int, int]:
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        pipe.metrics.subscribe(events.append)
        try:
            alone = await pipe.complete(prompt, GenerationConfig(max_new_tokens=1))
            assert 256 < alone.prompt_tokens < 400
            background = asyncio.ensure_future(
                pipe.complete("def f(x):", GenerationConfig(max_new_tokens=480))
            )
            while not any(
                isinstance(e, StageTiming) and e.stream_id != _first(events) for e in events
            ):
                await asyncio.sleep(0.01)  # the background stream is generating
            other = prompt.replace("alpha", "omega")  # no prefix kept from the first
            beside = await pipe.complete(other, GenerationConfig(max_new_tokens=1))
            assert not background.done()
            await background
            assert beside.stream_id != _first(events)
            return _first(events), beside.stream_id
        finally:
            await pipe.close()

    first, beside = run(main())
    passes = {
        stream: [
            e.positions
            for e in events
            if isinstance(e, StageTiming) and e.stream_id == stream and e.stage == 0
        ]
        for stream in (first, beside)
    }
    assert max(passes[first]) == 256  # alone: full passes
    assert max(passes[beside]) <= SHARED_PREFILL_CHUNK < 256 and len(passes[beside]) > 1


def _first(events: list[object]) -> int:
    return next(e.stream_id for e in events if isinstance(e, StageTiming))
