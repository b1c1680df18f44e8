"""Device profiles (``fleetgui.planner.profiles``): the ``DEVICES.json`` file, read, checked
entry by entry and written. (Model profiles: ``test_model_profile.py``.)"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from fleetgui.errors import FleetguiError
from fleetgui.planner import (
    DeviceProfile,
    DevicesFileError,
    load_devices,
    parse_devices,
    save_devices,
)
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
