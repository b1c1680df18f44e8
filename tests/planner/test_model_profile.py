"""Model profiles (``fleetgui.planner.model_profile``) from HF folders and export folders: what
the planner knows of a model's layers and weights."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgui.planner import ModelProfileError, load_model_profile
from fleetgui.planner.model_profile import BYTES_PER_PARAMETER, config_parameters
from fleetgui.torch_env import hide_torchvision

hide_torchvision()  # before the tiny_models fixture imports transformers


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # untied and tied embeddings
def test_model_profile_from_hf_folder(tiny_models: Callable[..., Path], family: str) -> None:
    from fleetgui.export.model_source import open_model_source

    folder = tiny_models(family)
    source = open_model_source(folder)
    profile = load_model_profile(folder, streams=3)
    hidden, vocab = source.hidden_size, source.vocab_size
    assert profile.model_id == source.model_id and profile.n_layers == source.n_layers
    assert profile.weight_format == "int4"  # what ``fleetgui export`` writes by default
    assert profile.layer_parameters == max(
        source.layer_parameters(i) for i in range(source.n_layers)
    )
    assert profile.embedding_parameters == vocab * hidden
    assert profile.lm_head_parameters == vocab * hidden + hidden  # lm_head (or a tied copy), norm
    assert profile.kv_bytes_per_token_per_layer == 2 * 2 * 16 * 2  # 2 KV heads of 16, f16
    assert profile.activation_bytes == hidden * 4
    assert profile.context_length == 512 and profile.streams == 3  # max_position_embeddings
    assert profile.layer_kv_bytes == 2 * 2 * 16 * 2 * 512 * 3
    fp16 = profile.with_weight_format("fp16")
    assert fp16.layer_weight_bytes == 2 * profile.layer_parameters
    assert profile.layer_weight_bytes == math.ceil(
        profile.layer_parameters * BYTES_PER_PARAMETER["int4"]
    )
    estimated, _, _ = config_parameters(source.config)  # what export folders rely on
    assert estimated == pytest.approx(profile.layer_parameters, rel=0.01)


@pytest.fixture(scope="module")
def fp16_export(tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama exported in 2 fp16 stages."""
    from fleetgui.export.exporter import ExportRequest, export_model

    out = tmp_path_factory.mktemp("planner_export") / "tiny-llama-fp16"
    export_model(ExportRequest(tiny_models("llama"), out, stages=2, weights="fp16"))
    return out


def test_model_profile_from_export_folder(fp16_export: Path) -> None:
    from fleetgui.export.manifest import read_manifest

    manifest = read_manifest(fp16_export)
    profile = load_model_profile(fp16_export)
    assert profile.model_id == manifest.model_id
    assert profile.weight_format == "fp16" and profile.n_layers == manifest.n_layers
    actual = sum(f.size for s in manifest.stages for f in s.files if f.path.endswith(".bin"))
    predicted = (
        profile.n_layers * profile.layer_weight_bytes
        + profile.embedding_bytes
        + profile.lm_head_bytes
    )
    assert predicted == pytest.approx(actual, rel=0.01)  # calibrated on the stage files
    assert 0.9 < profile.bytes_scale < 1.1  # and the estimate was close before calibration
    with pytest.raises(ModelProfileError, match="exported with fp16"):
        load_model_profile(fp16_export, weight_format="int4")


def test_a_folder_that_is_no_model_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(ModelProfileError, match="neither a fleetgui export"):
        load_model_profile(tmp_path)
