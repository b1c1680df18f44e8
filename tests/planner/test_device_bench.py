"""The device micro-benchmark (``fleetgui.planner.device_bench``): a real 1-layer shard timed on
CPU, cached per model/format/device; the sustained step time of a series of steps."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import pytest

from fleetgui.planner import device_bench
from fleetgui.planner.device_bench import measure_disk_read, measure_layer_ms, profile_machine
from fleetgui.torch_env import hide_torchvision

hide_torchvision()  # before the tiny_models fixture imports transformers

#: Timing a real shard builds it with torch and runs it with OpenVINO.
measures = pytest.mark.skipif(
    find_spec("openvino") is None or find_spec("torch") is None,
    reason="timing a layer needs openvino and torch",
)


@measures
def test_layer_time_is_measured_once_then_cached(
    tiny_models: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path / "home"))
    model = tiny_models("llama")
    first = measure_layer_ms(model, "fp16", "CPU", past_tokens=32, warmup=2, steps=8)
    assert not first.from_cache
    assert 0 < first.ms_per_layer < 1000
    cache = tmp_path / "home" / "data" / "planner" / "layer_timings.json"  # under data_dir()
    entries = json.loads(cache.read_text(encoding="utf-8"))["entries"]
    assert len(entries) == 1 and "|fp16|CPU|" in next(iter(entries))

    calls: list[tuple[str, str]] = []

    def fake_time_layer(model_dir: Path, fmt: str, device: str, **_: int) -> tuple[str, float]:
        calls.append((fmt, device))
        return "unused", 42.0

    monkeypatch.setattr(device_bench, "_time_layer", fake_time_layer)
    second = measure_layer_ms(model, "fp16", "CPU")
    assert second.from_cache and second.ms_per_layer == first.ms_per_layer
    assert calls == []  # the second call did not measure

    other = measure_layer_ms(model, "int4", "CPU")  # another format is another entry
    assert not other.from_cache and calls == [("int4", "CPU")]
    refreshed = measure_layer_ms(model, "fp16", "CPU", refresh=True)
    assert not refreshed.from_cache and refreshed.ms_per_layer == 42.0
    assert measure_layer_ms(model, "fp16", "CPU").ms_per_layer == 42.0  # the new value is kept


@measures
def test_profile_machine_uses_the_cached_timing(
    tiny_models: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "timings.json"
    model = tiny_models("llama")
    timing = measure_layer_ms(model, "fp16", "CPU", cache_file=cache, warmup=1, steps=3)
    monkeypatch.setattr(device_bench, "_time_layer", None)  # calling it would fail
    machine = profile_machine(
        model,
        "fp16",
        name="this-pc",
        ov_devices=["CPU"],
        disk_folder=tmp_path / "disk",
        disk_bytes=8 * 1024 * 1024,
        cache_file=cache,
    )
    assert machine.model_id == timing.model_id and machine.free_ram_bytes > 0
    profile = machine.device_profile()
    assert profile.name == "this-pc" and profile.ov_device == "CPU"
    assert profile.ms_per_layer == timing.ms_per_layer
    assert profile.memory_bytes > 0 and profile.disk_read_bytes_per_s > 0
    assert machine.rtt_ms is None  # measured later by the fleet code
    assert not any((tmp_path / "disk").iterdir())  # the scratch file is gone


@measures
def test_disk_read_speed_is_positive(tmp_path: Path) -> None:
    assert measure_disk_read(tmp_path, 4 * 1024 * 1024) > 0


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
