"""`fleetgui export` end to end: manifest, atomicity, resume, bad input, verification."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fleetgui.export.architectures import UnsupportedArchitectureError
from fleetgui.export.exporter import ExportError, ExportProgress, ExportRequest, export_model
from fleetgui.export.manifest import MANIFEST_NAME, ManifestError, check_files, read_manifest
from fleetgui.export.model_source import ModelSourceError
from fleetgui.export.stage_chain import EXACT_CONFIG, StageChain
from fleetgui.export.verify import VerificationError, verify_export
from fleetgui.fsutil import sha256_file

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llama(tiny_models: Callable[..., Path]) -> Path:
    return tiny_models("llama")


@pytest.fixture(scope="module")
def llama_2stage(llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "llama-2s"
    export_model(ExportRequest(llama, out, stages=2, weights="fp32"))
    return out


def test_manifest_describes_every_file(llama_2stage: Path, llama: Path) -> None:
    manifest = read_manifest(llama_2stage)
    config = json.loads((llama / "config.json").read_text())
    assert manifest.architecture == "llama"
    assert manifest.n_layers == config["num_hidden_layers"] == 4
    assert manifest.hidden_size == config["hidden_size"]
    assert manifest.vocab_size == config["vocab_size"]
    assert manifest.weight_format == "fp32"
    assert [(s.start_layer, s.end_layer) for s in manifest.stages] == [(0, 2), (2, 4)]
    first, last = manifest.stages
    assert first.inputs[0] == "input_ids" and last.inputs[0] == "hidden_in"
    assert "beam_idx" in first.inputs and "attention_mask" in first.inputs
    assert first.outputs == ("hidden_out",)
    assert set(last.outputs) == {"logits", "top1_ids", "top1_probs"}
    assert first.kv_states == (
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.1.key",
        "past_key_values.1.value",
    )
    for stage in manifest.stages:
        assert check_files(llama_2stage, stage.files) == []
        for entry in stage.files:
            assert sha256_file(llama_2stage / entry.path) == entry.sha256
    names = {Path(f.path).name for f in manifest.tokenizer_files}
    assert {"openvino_tokenizer.xml", "openvino_detokenizer.xml", "tokenizer.json"} <= names
    assert not (llama_2stage.parent / f".{llama_2stage.name}.partial").exists()
    leftovers = [p.name for p in llama_2stage.iterdir() if p.name.endswith(".done.json")]
    assert leftovers == []


@pytest.mark.parametrize("bad", ["../../outside.bin", "/etc/passwd", "tokenizer/../../x"])
def test_a_manifest_naming_a_file_outside_the_export_is_refused(
    llama_2stage: Path, tmp_path: Path, bad: str
) -> None:
    """Opening such an export fails before anything is read (or uploaded) from ``bad``."""
    copy = tmp_path / "export"
    shutil.copytree(llama_2stage, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["stages"][0]["files"][0]["path"] = bad
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="leaves the export folder"):
        read_manifest(copy)


def test_verify_passes_against_hf_fp32(llama_2stage: Path, llama: Path) -> None:
    report = verify_export(llama_2stage, llama, decode_steps=32)
    assert report.passed and report.tokens_match
    assert report.max_logit_diff < 1e-4
    assert all(len(r.stage_diffs) == 2 for r in report.results)


def test_gemma3_export_verifies_against_hf_fp32(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    """Gemma 3 text (sliding and full layers with their own rotary bases, q/k norms): every
    stage boundary and the logits match HF fp32, and greedy tokens are identical."""
    model = tiny_models("gemma3")
    out = tmp_path / "gemma3-2s"
    export_model(ExportRequest(model, out, stages=2, weights="fp32"))
    assert read_manifest(out).architecture == "gemma3_text"
    report = verify_export(out, model, decode_steps=32)
    assert report.passed and report.tokens_match
    assert report.max_logit_diff < 1e-4
    assert all(len(r.stage_diffs) == 2 and max(r.stage_diffs) < 1e-4 for r in report.results)


def test_verify_catches_a_wrong_export(
    llama_2stage: Path, tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    other = tiny_models("llama", seed=7)  # same architecture, other weights
    report = verify_export(llama_2stage, other, decode_steps=8, prompts=["hello world"])
    assert not report.passed
    assert report.max_logit_diff > 1e-2


def test_rerun_reuses_unchanged_stages(llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "e"
    export_model(ExportRequest(llama, out, layers="0:1,1:4", weights="fp32"))
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("stage_*")}
    messages: list[str] = []
    export_model(
        ExportRequest(llama, out, layers="0:1,1:2,2:4", weights="fp32"),
        progress=lambda p: messages.append(p.message),
    )
    assert any("layers 0:1 of 4" in m and "reused" in m for m in messages)
    assert sum("reused" in m for m in messages) == 1
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("stage_*")}
    assert after["stage_0-1.xml"] == before["stage_0-1.xml"]
    assert "stage_1-4.xml" not in after  # files of the old split are gone
    assert set(after) == {
        f"stage_{r}.{ext}" for r in ("0-1", "1-2", "2-4") for ext in ("xml", "bin")
    }


def test_interrupted_export_leaves_nothing_that_looks_valid_and_resumes(
    llama: Path, tmp_path: Path
) -> None:
    out = tmp_path / "e"

    def interrupt_after_first_stage(progress: ExportProgress) -> None:
        if progress.step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_model(
            ExportRequest(llama, out, stages=2, weights="fp32"),
            progress=interrupt_after_first_stage,
        )
    assert not out.exists()
    partial = tmp_path / ".e.partial"
    assert partial.is_dir() and not (partial / MANIFEST_NAME).exists()

    messages: list[str] = []
    export_model(
        ExportRequest(llama, out, stages=2, weights="fp32"),
        progress=lambda p: messages.append(p.message),
    )
    assert any("layers 0:2" in m and "reused" in m for m in messages)
    assert read_manifest(out).stages[1].end_layer == 4
    assert not partial.exists()


def test_failed_verification_keeps_the_previous_export(llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "e"
    export_model(ExportRequest(llama, out, stages=1, weights="fp32"))
    old_manifest = (out / MANIFEST_NAME).read_text()

    def failing_verify(folder: Path) -> None:
        raise VerificationError("simulated mismatch")

    with pytest.raises(VerificationError):
        export_model(ExportRequest(llama, out, stages=2, weights="fp32"), verify=failing_verify)
    assert (out / MANIFEST_NAME).read_text() == old_manifest
    assert check_files(out, read_manifest(out).stages[0].files) == []


def _corrupt_weights(model: Path, tmp_path: Path) -> Path:
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return broken


def _with_config(model: Path, tmp_path: Path, **changes: object) -> Path:
    changed = tmp_path / "changed"
    shutil.copytree(model, changed)
    config = json.loads((changed / "config.json").read_text())
    config.update(changes)
    (changed / "config.json").write_text(json.dumps(config))
    return changed


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "message"),
    [
        ("missing folder", {}, ModelSourceError, "does not exist"),
        ("no config", {}, ModelSourceError, "config.json is missing"),
        ("truncated weights", {}, ModelSourceError, "truncated"),
        ("unsupported architecture", {}, UnsupportedArchitectureError, "gemma3_text, llama"),
        ("overlap", {"layers": "0:2,1:4"}, ExportError, "overlap"),
        ("gap", {"layers": "0:1,2:4"}, ExportError, "unassigned"),
        ("beyond the layers", {"layers": "0:2,2:5"}, ExportError, "exceeds the model's 4"),
        ("too many stages", {"stages": 5}, ExportError, "use --stages 4 or fewer"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    case: str,
    kwargs: dict[str, object],
    error: type[Exception],
    message: str,
    llama: Path,
    tmp_path: Path,
) -> None:
    model = llama
    if case == "missing folder":
        model = tmp_path / "nope"
    elif case == "no config":
        model = tmp_path / "empty"
        model.mkdir()
    elif case == "truncated weights":
        model = _corrupt_weights(llama, tmp_path)
    elif case == "unsupported architecture":
        model = _with_config(llama, tmp_path, model_type="gpt_bigcode")
    out = tmp_path / "out"
    with pytest.raises(error, match=message):
        export_model(ExportRequest(model, out, weights="fp32", **kwargs))  # type: ignore[arg-type]
    assert not out.exists()
    assert not (tmp_path / ".out.partial").exists() or not any(
        (tmp_path / ".out.partial").iterdir()
    )


def test_not_enough_disk_space(
    llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetgui.export import exporter

    class Usage:
        free = 1000

    monkeypatch.setattr(exporter.shutil, "disk_usage", lambda _: Usage())
    with pytest.raises(ExportError, match=r"not enough disk space.*int4 is smallest"):
        export_model(ExportRequest(llama, tmp_path / "out", weights="fp32"))
    assert not (tmp_path / "out").exists()


def test_refuses_to_overwrite_a_folder_that_is_not_an_export(llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not a fleetgui export"):
        export_model(ExportRequest(llama, out, weights="fp32"))
    assert (out / "notes.txt").read_text() == "keep me"


def test_int4_chain_matches_the_int4_monolithic_export(llama: Path, tmp_path: Path) -> None:
    stages = tmp_path / "int4-2s"
    mono = tmp_path / "int4-mono"
    export_model(ExportRequest(llama, stages, stages=2, weights="int4"))
    export_model(ExportRequest(llama, mono, monolithic=True, weights="int4"))
    report = verify_export(stages, llama, decode_steps=16, monolithic_dir=mono)
    for result in report.results:
        assert result.monolithic_tokens_match
        assert result.monolithic_max_diff is not None and result.monolithic_max_diff < 1e-3
    # Both exports alike change most argmaxes of this random model's flat logits: the split
    # costs nothing, and int4 itself fails the int4 quality limits here.
    assert report.quality.positions == 3 * 16
    assert not report.passed and report.quality.top1_agreement < 0.5


def test_int8_export_runs_close_to_fp32(llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "int8"
    export_model(ExportRequest(llama, out, stages=2, weights="int8"))
    sizes = sum(
        f.size for s in read_manifest(out).stages for f in s.files if f.path.endswith("bin")
    )
    report = verify_export(out, llama, decode_steps=8, prompts=["def main():"])
    assert report.max_logit_diff < 0.5, report.lines()
    assert sizes < 0.5 * 4 * read_manifest(out).hidden_size ** 2 * 12 * 4 + 2e6


def test_monolithic_export_loads_in_openvino_genai(llama: Path, tmp_path: Path) -> None:
    import openvino_genai
    from transformers import AutoModelForCausalLM, AutoTokenizer

    mono = tmp_path / "mono"
    export_model(ExportRequest(llama, mono, monolithic=True, weights="fp32"))
    messages: list[str] = []  # a second run reuses the model and keeps the tokenizer files
    export_model(
        ExportRequest(llama, mono, monolithic=True, weights="fp32"),
        progress=lambda p: messages.append(p.message),
    )
    assert any("reused" in m for m in messages)
    manifest = read_manifest(mono)
    assert manifest.layout == "monolithic"
    assert {"openvino_tokenizer.xml", "openvino_detokenizer.xml", "config.json"} <= {
        f.path for f in manifest.tokenizer_files
    }
    pipe = openvino_genai.LLMPipeline(str(mono), "CPU", **EXACT_CONFIG)
    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 12
    config.min_new_tokens = 12
    config.do_sample = False
    prompt = "def main():"
    text = pipe.generate(prompt, config)

    tokenizer = AutoTokenizer.from_pretrained(llama)
    model = AutoModelForCausalLM.from_pretrained(llama)
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    expected = model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert text == tokenizer.decode(expected[0, ids.shape[1] :], skip_special_tokens=True)

    chain = StageChain.load(mono, config=EXACT_CONFIG)
    step = chain.forward(ids[0].tolist())
    assert int(np.argmax(step.logits[0, -1])) == int(expected[0, ids.shape[1]])


def test_chunked_stages_bound_conversion_and_run_like_whole_ones(
    llama: Path, llama_2stage: Path, tmp_path: Path
) -> None:
    """--max-chunk-layers 1: each stage is converted (and later run) one layer at a time, so
    export memory is bounded by a layer, not a stage; results do not change."""
    import asyncio

    from fleetgui.generation_config import GenerationConfig
    from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
    from fleetgui.runtime.ov_stage import StageConfig

    out = tmp_path / "chunked"
    messages: list[str] = []
    export_model(
        ExportRequest(llama, out, stages=2, weights="fp32", max_chunk_layers=1),
        progress=lambda p: messages.append(p.message),
    )
    manifest = read_manifest(out)
    assert [s.model_files for s in manifest.stages] == [
        ("stage_0-1.xml", "stage_1-2.xml"),
        ("stage_2-3.xml", "stage_3-4.xml"),
    ]
    assert any("part 2/2" in m for m in messages)
    report = verify_export(out, llama, decode_steps=16, prompts=["def main():"])
    assert report.passed and len(report.results[0].stage_diffs) == 2

    async def tokens(folder: Path) -> list[int]:
        config = StageConfig(precision="f32")
        pipe = load_local_pipeline(folder, config=LocalPipelineConfig(stage=config))
        try:
            options = GenerationConfig(max_new_tokens=24)
            return (await pipe.complete("import sys", options)).token_ids
        finally:
            await pipe.close()

    assert asyncio.run(tokens(out)) == asyncio.run(tokens(llama_2stage))


def test_a_model_retrained_in_place_is_exported_again(llama: Path, tmp_path: Path) -> None:
    """Same names and shapes, other values (a retrained or fine-tuned model saved over the old
    one): the old shards must not be reused, and the two exports carry different identities."""
    from safetensors.numpy import load_file, save_file

    from fleetgui.export.model_source import open_model_source

    model = tmp_path / "model"
    shutil.copytree(llama, model)
    out = tmp_path / "e"
    export_model(ExportRequest(model, out, stages=2, weights="fp32"))
    first = read_manifest(out)
    assert open_model_source(model).identity_hash == first.model_hash

    weights = model / "model.safetensors"
    tensors = load_file(str(weights))
    save_file(tensors, str(weights), metadata={"format": "pt"})  # re-saved, values unchanged
    assert open_model_source(model).identity_hash == first.model_hash

    name = "model.layers.1.mlp.down_proj.weight"  # one tensor of one stage changes
    tensors[name] = (tensors[name] * 1.01).astype(tensors[name].dtype)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    messages: list[str] = []
    export_model(
        ExportRequest(model, out, stages=2, weights="fp32"),
        progress=lambda p: messages.append(p.message),
    )
    second = read_manifest(out)
    assert second.model_hash != first.model_hash
    assert second.model_id != first.model_id
    assert not any("up to date" in m or "reused" in m for m in messages), messages
    verify_export(out, model)


def test_weights_cut_by_a_few_bytes_are_caught(llama: Path, tmp_path: Path) -> None:
    """A file a few bytes short (fewer than its header's length): its last tensor ends past the
    data, which starts after the header."""
    from fleetgui.export.model_source import ModelSourceError, open_model_source

    model = tmp_path / "cut"
    shutil.copytree(llama, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])
    with pytest.raises(ModelSourceError, match="truncated"):
        open_model_source(model)
