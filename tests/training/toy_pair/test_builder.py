"""The toy pair's build (``fleetgui.training.toy_pair.builder``, ``fleetgui demo-model``): the
offline demo target/draft pair, built for real in the ``tiny`` size; sizes and folders refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from fleetgui.errors import FleetguiError
from fleetgui.training.progress import PHASE_LABELS, PHASE_WEIGHTS, BuildProgress
from fleetgui.training.toy_pair import INFO_FILE, build_demo_pair, load_pair
from fleetgui.training.toy_pair.spec import EOS_ID, TINY

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


#: Per-token draft/target agreement the tiny pair must reach on held-out code (the small pair's
#: is measured at build time and recorded in ``demo_model.json``).
TINY_MIN_AGREEMENT = 0.5


def test_unknown_size_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown demo size"):
        build_demo_pair(tmp_path / "x", "huge")


def test_a_folder_holding_something_else_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FleetguiError, match="does not hold demo models"):
        build_demo_pair(tmp_path, "tiny")
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"


# --------------------------------------------------------------------------------------------- #
# Real builds (the tiny pair, built once per session by the ``demo_pair_tiny`` fixture)


def _load(path: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _info(pair: Path) -> dict[str, Any]:
    return json.loads((pair / INFO_FILE).read_text(encoding="utf-8"))


@pytest.mark.slow
def test_pair_is_two_llamas_sharing_one_tokenizer(demo_pair_tiny: Path) -> None:
    for sub in ("target", "draft"):
        for name in MODEL_FILES:
            assert (demo_pair_tiny / sub / name).is_file(), f"{sub}/{name} missing"
    assert (demo_pair_tiny / "target" / "tokenizer.json").read_bytes() == (
        demo_pair_tiny / "draft" / "tokenizer.json"
    ).read_bytes()

    target, tokenizer = _load(demo_pair_tiny / "target")
    draft, draft_tokenizer = _load(demo_pair_tiny / "draft")
    assert tokenizer.get_vocab() == draft_tokenizer.get_vocab()
    assert len(tokenizer) == TINY.vocab_size
    assert target.config.vocab_size == draft.config.vocab_size == TINY.vocab_size
    assert target.config.model_type == draft.config.model_type == "llama"
    assert [tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token] == [
        "<|bos|>",
        "<|eos|>",
        "<|pad|>",
    ]
    # byte-level: any text round-trips, including characters never seen in training
    text = "def f(x):\n\treturn x + 1  # ünïcødé ✓\n"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text

    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    assert 300_000 < n_target < 2_000_000
    assert 50_000 < n_draft < n_target / 2

    info = _info(demo_pair_tiny)
    assert info["complete"] is True
    assert info["size"] == "tiny"
    assert info["parameters"] == {"target": n_target, "draft": n_draft}
    target_training = info["training"]["target"]
    assert target_training["final_loss"] < target_training["first_loss"] - 1.0
    assert info["training"]["draft"]["final_loss"] < info["training"]["draft"]["first_loss"]
    assert info["corpus"]["train_files"] > 10
    assert info["corpus"]["heldout_files"] > 0
    assert len(info["sha256"]) == 64
    python = info["python"]  # greedy completions of held-out code, checked by the compiler
    assert python["prompts"] == TINY.acceptance.num_prompts
    assert python["new_tokens"] == TINY.acceptance.gen_len
    assert 0.0 <= python["valid_prefix"] <= 1.0
    assert 0.0 < python["distinct_4grams"] <= 1.0


@pytest.mark.slow
def test_distilled_draft_agrees_with_the_target_on_held_out_code(demo_pair_tiny: Path) -> None:
    acceptance = _info(demo_pair_tiny)["acceptance"]
    assert set(acceptance["block_acceptance"]) == {str(k) for k in range(1, 9)}
    block = acceptance["block_acceptance"]
    assert 0.0 < block["8"] < block["1"] <= 1.0  # long blocks are cut short more often...
    assert acceptance["per_token_agreement"] >= TINY_MIN_AGREEMENT
    steps = acceptance["tokens_per_target_step"]
    assert 1.0 < steps["1"] <= 2.0
    assert steps["8"] > steps["1"]  # ...yet yield more tokens per target step


@pytest.mark.slow
def test_cli_rebuild_over_an_incomplete_folder_is_identical_then_reused(
    demo_pair_tiny: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    out = home / "shards_cache" / "demo-model-tiny"
    (out / "target").mkdir(parents=True)
    (out / "target" / "config.json").write_text("{}", encoding="utf-8")
    (out / INFO_FILE).write_text('{"complete": false}', encoding="utf-8")
    assert load_pair(out) is None

    result = run_cli(home, "demo-model", "--size", "tiny")
    assert result.returncode == 0, result.stderr
    assert f"built tiny demo pair in {out}" in result.stdout
    assert "K=2" in result.stdout and "K=8" in result.stdout
    assert "held-out code prompts" in result.stdout and "valid Python" in result.stdout
    for phase in PHASE_WEIGHTS:  # one progress bar per phase of the pair's build, on stderr
        assert PHASE_LABELS[phase] in result.stderr
    assert "100%" in result.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo-model-tiny"]

    # deterministic: the same bytes as the session's in-process build
    for sub in ("target", "draft"):
        for name in MODEL_FILES:
            assert (out / sub / name).read_bytes() == (demo_pair_tiny / sub / name).read_bytes(), (
                f"{sub}/{name}"
            )
    first, second = _info(demo_pair_tiny), _info(out)
    assert second["sha256"] == first["sha256"]
    assert second["training"] == first["training"]
    assert second["acceptance"] == first["acceptance"]
    assert second["sample"] == first["sample"]
    assert second["python"] == first["python"]

    before = (out / "target" / "model.safetensors").stat().st_mtime_ns
    again = run_cli(home, "demo-model", "--size", "tiny", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "reused existing tiny demo pair" in again.stdout
    assert (out / "target" / "model.safetensors").stat().st_mtime_ns == before

    assert load_pair(out, "tiny") is not None
    assert load_pair(out, "small") is None
    record = _info(out)
    record["spec"]["target_train"]["steps"] += 1  # built from another recipe: not reused
    (out / INFO_FILE).write_text(json.dumps(record), encoding="utf-8")
    assert load_pair(out, "tiny") is None
    (out / INFO_FILE).write_text(json.dumps(second), encoding="utf-8")
    assert load_pair(out, "tiny") is not None
    (out / "draft" / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    assert load_pair(out, "tiny") is None  # a changed file: not reused


@pytest.mark.slow
def test_interrupted_build_leaves_no_valid_looking_folder(tmp_path: Path) -> None:
    class StopBuildError(Exception):
        pass

    def stop_in_training(event: BuildProgress) -> None:
        if event.phase == "target" and event.done >= 2:
            raise StopBuildError

    out = tmp_path / "pair"
    stale = tmp_path / ".pair.partial-99999999"  # an earlier build whose process is gone
    (stale / "target").mkdir(parents=True)
    with pytest.raises(StopBuildError):
        build_demo_pair(out, "tiny", progress=stop_in_training)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    assert load_pair(out) is None


@pytest.mark.slow
def test_pair_exports_and_generates_through_the_pipeline(
    demo_pair_tiny: Path, tmp_path: Path
) -> None:
    """The pair is what ``fleetgui export`` takes: 2 target stages and a 1-stage draft give,
    with and without speculation, the HF target's own greedy tokens."""
    import torch
    from runtime_support import export, pipeline

    from fleetgui.export.manifest import read_manifest
    from fleetgui.generation_config import GenerationConfig

    target_export = export(demo_pair_tiny / "target", tmp_path / "target-2s", stages=2)
    draft_export = export(demo_pair_tiny / "draft", tmp_path / "draft-1s", stages=1)
    assert len(read_manifest(target_export).stages) == 2

    prompt = "import os\n\ndef read_file(path):\n"
    n_new = 24
    model, tokenizer = _load(demo_pair_tiny / "target")
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=n_new, do_sample=False)
    expected = [int(t) for t in out[0, ids["input_ids"].shape[1] :] if int(t) != EOS_ID]

    async def main() -> None:
        pipe = pipeline(target_export, draft=draft_export)
        try:
            plain = await pipe.complete(prompt, GenerationConfig(max_new_tokens=n_new))
            assert [t for t in plain.token_ids if t != EOS_ID] == expected
            for k in (2, 4):
                options = GenerationConfig(max_new_tokens=n_new, k=k)
                spec = await pipe.complete(prompt, options)
                assert spec.token_ids == plain.token_ids, k
                assert spec.acceptance_rate is not None
                assert spec.acceptance_rate > 0.2, k
        finally:
            await pipe.close()

    asyncio.run(main())
