"""Device profiles (``DEVICES.json``) and model profiles from HF and export folders."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleetgui.errors import FleetguiError
from fleetgui.planner import (
    DeviceProfile,
    DevicesFileError,
    ModelProfileError,
    load_devices,
    load_model_profile,
    parse_devices,
    save_devices,
)
from fleetgui.planner.model_profile import BYTES_PER_PARAMETER, config_parameters
from fleetgui.torch_env import hide_torchvision

hide_torchvision()  # before the tiny_models fixture imports transformers

GOOD = {
    "name": "laptop",
    "memory_bytes": 16_000_000_000,
    "ms_per_layer": 1.5,
    "disk_read_bytes_per_s": 2e9,
    "rtt_ms": 1.2,
    "bandwidth_bytes_per_s": 1.1e8,
}
COORDINATOR = {**GOOD, "name": "desk", "rtt_ms": 0, "bandwidth_bytes_per_s": 0}


def test_parse_devices_reads_every_field() -> None:
    devices = parse_devices([COORDINATOR, GOOD])
    assert [d.name for d in devices] == ["desk", "laptop"]
    laptop = devices[1]
    assert laptop == DeviceProfile("laptop", 16_000_000_000, 1.5, 2e9, 1.2, 1.1e8)
    # the coordinator's link to itself is perfect whatever the file says
    assert devices[0].rtt_ms == 0 and math.isinf(devices[0].bandwidth_bytes_per_s)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"not": "a list"}, "non-empty JSON list"),
        ([], "non-empty JSON list"),
        ([COORDINATOR, "laptop"], "entry 1 must be a JSON object"),
        ([COORDINATOR, {k: v for k, v in GOOD.items() if k != "ms_per_layer"}],
         "entry 1 ('laptop'): missing field 'ms_per_layer'"),
        ([COORDINATOR, {**GOOD, "ms_per_layers": 1}], "entry 1 ('laptop'): unknown field"),
        ([COORDINATOR, {**GOOD, "ms_per_layer": "fast"}],
         "entry 1 ('laptop'): field 'ms_per_layer' must be a number, got 'fast'"),
        ([COORDINATOR, {**GOOD, "ms_per_layer": True}], "field 'ms_per_layer' must be a number"),
        ([COORDINATOR, {**GOOD, "ms_per_layer": 0}], "field 'ms_per_layer' must be a positive"),
        ([COORDINATOR, {**GOOD, "memory_bytes": -5}], "field 'memory_bytes' must be positive"),
        ([COORDINATOR, {**GOOD, "memory_bytes": 1.5}], "field 'memory_bytes' must be a whole"),
        ([COORDINATOR, {**GOOD, "memory_bytes": float("inf")}], "'memory_bytes' must be a whole"),
        ([COORDINATOR, {**GOOD, "ms_per_layer": float("nan")}], "'ms_per_layer' must be a posit"),
        ([COORDINATOR, {**GOOD, "rtt_ms": -1}], "entry 1 ('laptop'): field 'rtt_ms'"),
        ([COORDINATOR, {**GOOD, "bandwidth_bytes_per_s": 0}],
         "entry 1 ('laptop'): field 'bandwidth_bytes_per_s' must be positive"),
        ([COORDINATOR, {**GOOD, "disk_read_bytes_per_s": None}],
         "field 'disk_read_bytes_per_s' must be a number"),
        ([COORDINATOR, {**GOOD, "name": ""}], "entry 1: field 'name' must be a non-empty string"),
        ([COORDINATOR, {**GOOD, "name": "desk"}], "entry 1 ('desk'): field 'name' repeats"),
    ],
)  # fmt: skip
def test_malformed_devices_name_the_entry_and_field(data: Any, expected: str) -> None:
    with pytest.raises(DevicesFileError) as info:
        parse_devices(data, "devices.json")
    assert expected in str(info.value)
    assert isinstance(info.value, FleetguiError)


def test_load_devices_reports_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(DevicesFileError, match="cannot read devices file"):
        load_devices(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    with pytest.raises(DevicesFileError, match="is not valid JSON"):
        load_devices(bad)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    devices = parse_devices([COORDINATOR, GOOD])
    save_devices(tmp_path / "devices.json", devices)
    assert load_devices(tmp_path / "devices.json") == devices


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
def tiny_export(tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fleetgui.export.exporter import ExportRequest, export_model

    out = tmp_path_factory.mktemp("planner_export") / "tiny-llama-fp16"
    export_model(ExportRequest(tiny_models("llama"), out, stages=2, weights="fp16"))
    return out


def test_model_profile_from_export_folder(tiny_export: Path) -> None:
    from fleetgui.export.manifest import read_manifest

    manifest = read_manifest(tiny_export)
    profile = load_model_profile(tiny_export)
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
        load_model_profile(tiny_export, weight_format="int4")


def test_a_folder_that_is_no_model_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(ModelProfileError, match="neither a fleetgui export"):
        load_model_profile(tmp_path)


@pytest.mark.parametrize(
    "times, expected",
    [
        ([2.0] * 10, 2.0),
        # a 50% CPU quota throttles 8 of 20 short steps: the median (1.4) would hide it
        ([1.4] * 12 + [3.4] * 8, 2.15),
        # one hiccup among 20 steps is trimmed away
        ([1.0] * 19 + [50.0], 1.0),
        ([3.0], 3.0),
    ],
)
def test_sustained_step_time(times: list[float], expected: float) -> None:
    from fleetgui.planner.device_bench import sustained_ms

    assert sustained_ms(times) == pytest.approx(expected)


def test_sustained_step_time_rejects_bad_input() -> None:
    from fleetgui.planner.device_bench import sustained_ms

    with pytest.raises(ValueError, match="no step times"):
        sustained_ms([])
    with pytest.raises(ValueError, match="trim"):
        sustained_ms([1.0], trim=0.5)
