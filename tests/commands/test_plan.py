"""``fleetgui plan``: the JSON contract, the table, the layout for several users with its
alternatives, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import PLAN_DEVICE_KEYS, PLAN_KEYS

from fleetgui.cli import main
from fleetgui.torch_env import hide_torchvision

hide_torchvision()  # before the tiny_models fixture imports transformers

DEVICES = [
    {"name": "desk", "memory_bytes": 3_000_000_000, "ms_per_layer": 2.0,
     "disk_read_bytes_per_s": 1e9, "rtt_ms": 0, "bandwidth_bytes_per_s": 0},
    {"name": "laptop", "memory_bytes": 16_000_000_000, "ms_per_layer": 1.0,
     "disk_read_bytes_per_s": 5e8, "rtt_ms": 1.0, "bandwidth_bytes_per_s": 1e8},
    {"name": "old-pc", "memory_bytes": 16_000_000_000, "ms_per_layer": 9.0,
     "disk_read_bytes_per_s": 1e8, "rtt_ms": 3.0, "bandwidth_bytes_per_s": 2e7},
]  # fmt: skip


@pytest.fixture
def home(fleetgui_home: Path) -> Path:
    """Where a test writes its devices file (the test's folder: FLEETGUI_HOME is in it)."""
    return fleetgui_home.parent


def write_devices(folder: Path, data: Any) -> Path:
    path = folder / "devices.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_document(doc: dict[str, Any], n_layers: int) -> None:
    assert set(doc) == PLAN_KEYS
    assert doc["devices"][0]["name"] == "desk" and doc["devices"][0]["start_layer"] == 0
    start = 0
    for entry in doc["devices"]:
        assert set(entry) == PLAN_DEVICE_KEYS
        assert entry["start_layer"] == start < entry["end_layer"]
        assert entry["memory_bytes"] > 0 and entry["predicted_ms"] > 0
        start = entry["end_layer"]
    assert start == n_layers
    assert doc["max_streams"] == min(e["max_streams"] for e in doc["devices"])
    assert sum(e["predicted_ms"] for e in doc["devices"]) == pytest.approx(
        doc["predicted_ms_per_token"], abs=1e-3
    )
    names = [e["name"] for e in doc["devices"]] + [x["name"] for x in doc["left_out"]]
    assert sorted(names) == sorted(d["name"] for d in DEVICES)
    assert all(x["reason"] for x in doc["left_out"])


def test_json_plan_of_a_model_folder(
    tiny_models: Callable[..., Path], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_models("llama", n_layers=8)
    code, out, err = run_plan(capsys, str(model), "--devices", str(write_devices(home, DEVICES)),
                              "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    check_document(doc, 8)
    # the fast laptop takes all it can; the slow PC is not worth its hop
    assert [d["name"] for d in doc["devices"]] == ["desk", "laptop"]
    assert doc["devices"][0]["end_layer"] == 1
    assert doc["left_out"][0]["name"] == "old-pc"
    assert "leaving it out is faster" in doc["left_out"][0]["reason"]
    assert doc["predicted_tokens_per_s"] == pytest.approx(
        1000 / doc["predicted_ms_per_token"], rel=1e-3
    )


def test_throughput_plan_of_an_export_folder(
    tiny_models: Callable[..., Path],
    tmp_path_factory: pytest.TempPathFactory,
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fleetgui.export.exporter import ExportRequest, export_model

    export = tmp_path_factory.mktemp("plan_cli_export") / "export"
    export_model(ExportRequest(tiny_models("llama"), export, stages=2, weights="fp16"))
    devices = write_devices(home, DEVICES)
    code, out, err = run_plan(capsys, str(export), "--devices", str(devices), "--json",
                              "--objective", "throughput", "--streams", "4")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    check_document(doc, 4)
    one_user = 1000 / doc["predicted_ms_per_token"]
    assert doc["predicted_tokens_per_s"] > one_user  # 4 streams in flight beat one


def test_table_output(
    tiny_models: Callable[..., Path], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_models("llama", n_layers=8)
    code, out, _ = run_plan(capsys, str(model), "--devices", str(write_devices(home, DEVICES)))
    assert code == 0
    assert "desk" in out and "0:1" in out and "laptop" in out and "1:8" in out
    assert "Left out:" in out and "old-pc" in out and "tokens/s" in out


def test_the_plan_says_what_each_stream_costs_and_how_many_each_pc_holds(
    tiny_models: Callable[..., Path], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Continuous batching: a stage's KV for B streams, and the largest B each PC holds beside
    its weights (the desk has 1 GB above its 2 GB headroom, the laptop 14 GB)."""
    model = tiny_models("llama", n_layers=8)
    devices = write_devices(home, DEVICES)
    code, out, err = run_plan(capsys, str(model), "--devices", str(devices), "--json",
                              "--objective", "throughput", "--streams", "3")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    for entry, device in zip(doc["devices"], DEVICES, strict=False):
        layers = entry["end_layer"] - entry["start_layer"]
        assert entry["stream_kv_bytes"] > 0 and entry["stream_kv_bytes"] % layers == 0
        # the memory of 3 streams planned, and the most that fit in what is left of the PC
        kv_3 = 3 * entry["stream_kv_bytes"]
        rest = entry["memory_bytes"] - kv_3
        capacity = device["memory_bytes"] - 2_000_000_000
        most = entry["max_streams"]
        assert rest + most * entry["stream_kv_bytes"] <= capacity
        assert rest + (most + 1) * entry["stream_kv_bytes"] > capacity
    code, out, _ = run_plan(capsys, str(model), "--devices", str(devices),
                            "--objective", "throughput", "--streams", "3")  # fmt: skip
    assert "Streams in one pass" in out and "for 3; holds up to" in out
    assert f"largest batch: {doc['max_streams']} stream(s)" in out


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("[{", "is not valid JSON"),
        ([], "non-empty JSON list"),
        ([DEVICES[0], {**DEVICES[1], "ms_per_layer": "fast"}],
         "entry 1 ('laptop'): field 'ms_per_layer' must be a number"),
        ([DEVICES[0], {k: v for k, v in DEVICES[2].items() if k != "rtt_ms"}],
         "entry 1 ('old-pc'): missing field 'rtt_ms'"),
    ],
)  # fmt: skip
def test_malformed_devices_file_exits_1_with_a_clear_error(
    tiny_models: Callable[..., Path],
    home: Path,
    capsys: pytest.CaptureFixture[str],
    data: Any,
    expected: str,
) -> None:
    path = home / "devices.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    code, out, err = run_plan(capsys, str(tiny_models("llama")), "--devices", str(path), "--json")
    assert code == 1 and out == ""
    assert "fleetgui plan: error:" in err and expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("options", "expected"),
    [(["--streams", "0"], "--streams must be at least 1"),
     (["--headroom-gb", "-1"], "--headroom-gb must be zero or more"),
     (["--headroom-gb", "15"], "the coordinator desk cannot hold stage 0"),
     (["--headroom-gb", "15"], "needs 12.3 GB more on desk")],
)  # fmt: skip
def test_bad_options_and_no_fit_exit_1(
    tiny_models: Callable[..., Path],
    home: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    expected: str,
) -> None:
    devices = write_devices(home, DEVICES)
    code, _, err = run_plan(capsys, str(tiny_models("llama")), "--devices", str(devices), *options)
    assert code == 1 and expected in err


def test_json_stdout_is_only_json(tiny_models: Callable[..., Path], tmp_path: Path) -> None:
    devices = write_devices(tmp_path, DEVICES)
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-m", "fleetgui", "--log-level", "debug", "plan",
         str(tiny_models("llama")), "--devices", str(devices), "--json"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    check_document(json.loads(result.stdout), 4)  # logs went to stderr, not into the JSON


def test_cli_prints_the_layout_and_its_alternatives(
    tiny_models: Callable[..., Path], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, devices = str(tiny_models("llama", n_layers=8)), str(write_devices(home, DEVICES))
    code, out, err = run_plan(capsys, model, "--devices", devices, "--users", "2")
    assert code == 0, err
    assert "for 2 user(s): 2 whole copies of the model, one per PC" in out
    assert "Group 1: copy on desk" in out and "Group 2: copy on laptop, tokens via desk" in out
    assert "Why: the alternatives for 2 user(s):" in out and "pipeline: desk+laptop" in out
    assert "Left out:" in out and "old-pc" in out
    code, out, err = run_plan(capsys, model, "--devices", devices, "--users", "2", "--json",
                              "--floor", "5")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kind"] == "copies" and doc["users"] == 2 and doc["floor_tokens_per_s"] == 5
    assert [g["devices"][0]["name"] for g in doc["groups"]] == ["desk", "laptop"]
    assert [g["starts_at_coordinator"] for g in doc["groups"]] == [True, False]
    assert doc["predicted_tokens_per_s"] == pytest.approx(
        sum(g["predicted_tokens_per_s"] for g in doc["groups"]), rel=1e-3
    )
    assert doc["alternatives"] and all(a["reason"] for a in doc["alternatives"])


@pytest.mark.parametrize(
    ("options", "expected"),
    [(["--floor", "5"], "--floor needs --users"),
     (["--users", "0"], "--users must be at least 1"),
     (["--users", "2", "--floor", "0"], "--floor must be more than 0"),
     (["--users", "2", "--streams", "2"], "--streams does not go with --users"),
     (["--users", "2", "--objective", "latency"], "--objective does not go with --users")],
)  # fmt: skip
def test_cli_bad_user_options_exit_1(
    tiny_models: Callable[..., Path],
    home: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    expected: str,
) -> None:
    devices = str(write_devices(home, DEVICES))
    code, _, err = run_plan(capsys, str(tiny_models("llama")), "--devices", devices, *options)
    assert code == 1 and expected in err
