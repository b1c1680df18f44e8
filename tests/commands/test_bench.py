"""``fleetgui bench`` end to end on a tiny export: real worker processes on delayed links (network
namespaces as root, the delay relay otherwise), every configuration measured, the JSON, the PNG
and the markdown written, and everything torn down, also on Ctrl+C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from fleet_support import default_sigint
from runtime_support import export

from fleetgui.bench.netns import PREFIX

pytestmark = pytest.mark.slow

DELAYS = (0, 20)
THIRD = re.compile(r"\[ *3/\d+\] ")  # the progress line of the third configuration
#: every configuration the run must report, and at which delays (None: once, no network)
EXPECTED: dict[str, tuple[int, ...] | None] = {
    "monolithic": None,
    "pp": DELAYS,
    "pp+mb/2": DELAYS,
    "pp+mb/3": DELAYS,
    **{f"pp+sd/k{k}/{d}": DELAYS for d in ("draft-1s", "ngram") for k in (1, 3, 5, 7, 10, "auto")},
    "pp+sd+mb/2/kauto/draft-1s": DELAYS,
    "pp+sd+mb/3/kauto/draft-1s": DELAYS,
    "ttft/16": DELAYS,
    "ttft/128": DELAYS,  # the tiny model's context (512) leaves 512-token prompts out
    "pp/hub": (20,),  # ring vs hub at the largest delay
}


@pytest.fixture(scope="module")
def tiny_target(
    tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """A tiny Llama in 2 stages, itself whole as the draft (a draft that always agrees) and its
    monolithic export."""
    root = tmp_path_factory.mktemp("bench")
    model = tiny_models("llama")
    return {
        "target": export(model, root / "exp-2s", stages=2),
        "draft": export(model, root / "draft-1s", stages=1),
        "mono": export(model, root / "mono", monolithic=True),
    }


def _bench_command(target: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "fleetgui", "bench", str(target["target"]),
        "--draft", str(target["draft"]), "--baseline", str(target["mono"]),
        "--tokens", "8", "--repeats", "1", "--delays", ",".join(map(str, DELAYS)),
        "--json", str(out / "bench.json"), "--plot", str(out / "bench.png"),
        "--markdown", str(out / "bench.md"), *extra,
    ]  # fmt: skip


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "FLEETGUI_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def _namespaces() -> set[str]:
    if sys.platform != "linux" or os.geteuid() != 0:
        return set()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in listed.stdout.splitlines() if line.startswith(PREFIX)}


def _workers_of(home: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "worker" in cmdline and any(str(home) in part for part in cmdline):
            found.append(process)
    return found


def _check_json(record: dict[str, Any]) -> None:
    assert record["schema"] == "fleetgui-bench/1"
    assert record["command"].startswith("fleetgui bench ")
    assert record["machine"]["cpu"] and record["machine"]["cores"] >= 1
    assert record["versions"]["openvino"]
    assert record["settings"]["delays_ms"] == list(DELAYS)
    network = record["network"]
    if sys.platform == "linux" and os.geteuid() == 0:
        assert network["method"] in ("netem", "packets"), network
        assert not network["emulated"]
    else:
        assert network["method"] == "proxy" and network["emulated"], network
    assert "every hop" in network["topology"]
    seen = {(c["key"], c["delay_ms"]) for c in record["configurations"]}
    for key, delays in EXPECTED.items():
        for delay in [None] if delays is None else delays:
            assert (key, delay) in seen, f"{key} at {delay} ms is missing"
    assert len(seen) == len(record["configurations"])  # one object per configuration and delay
    for c in record["configurations"]:
        assert c["repeats_run"] == 1, c
        if c["mode"] == "ttft":
            assert c["ttft_ms"] > 0, c
        else:
            assert c["tokens_per_s"] > 0, c
            assert c["new_tokens"] > 0, c
        if c["mode"] == "pp+sd" and c["draft"] == "draft-1s":  # the target itself: it agrees
            assert c["acceptance"] >= 0.8 and c["mean_k"] >= 1, c
        if c["key"] == "pp":
            parts = c["breakdown_ms_per_token"]
            assert parts["stage_compute_ms"] > 0 and parts["transfer_ms"] > 0, c
    summary = record["summary"]
    assert summary["full_stack"] == "pp+sd+mb/2/kauto/draft-1s"
    assert all(summary["full_stack_over_pp"][str(d)] > 0 for d in DELAYS)
    assert {c["draft"] for c in summary["k_auto_vs_best_fixed"]["20"]} == {"draft-1s", "ngram"}
    assert summary["ring_over_hub"]["ratio"] > 0


def _pp(record: dict[str, Any], delay: int) -> dict[str, Any]:
    return next(c for c in record["configurations"] if c["key"] == "pp" and c["delay_ms"] == delay)


def test_bench_measures_every_configuration_on_delayed_links(
    tiny_target: dict[str, Path], tmp_path: Path
) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        _bench_command(tiny_target, out),
        capture_output=True, text=True, env=_env(home), timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    record = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    _check_json(record)
    # the delay is real: the hop measured at 20 ms, and PP a token pays it on 3 hops
    assert 18 <= record["measured_hop_ms"]["20"] <= 40, record["measured_hop_ms"]
    assert record["measured_hop_ms"]["0"] < 10, record["measured_hop_ms"]
    slow = _pp(record, 20)["breakdown_ms_per_token"]
    assert slow["transfer_ms"] >= 3 * 18, slow
    assert _pp(record, 20)["tokens_per_s"] < _pp(record, 0)["tokens_per_s"]

    png = (out / "bench.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    from matplotlib import image

    pixels = image.imread(out / "bench.png")
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600
    assert pixels.std() > 0.05  # lines and text, not a blank canvas

    text = (out / "bench.md").read_text(encoding="utf-8")
    assert "| configuration | 0 ms a hop | 20 ms a hop |" in text
    assert "| PP+SD+MB, 2 streams, K=auto (draft-1s) |" in text
    assert "](bench.png)" in text
    assert record["machine"]["cpu"] in text  # the CPU is named beside the figures
    # progress: which configuration, how many in all, the time so far and left
    assert re.search(r"^\[ *1/\d+\] this PC, no network, repeat 1/1: mono", done.stderr, re.M)
    assert re.search(r"^\[ *\d+/\d+\] 20 ms a hop, repeat 1/1: PP ", done.stderr, re.M)
    assert "left)" in done.stderr
    run_id = record["network"].get("run_id")
    assert not any(run_id and run_id in name for name in _namespaces())  # the network is gone
    assert _workers_of(home) == []


def test_ctrl_c_stops_the_bench_and_tears_everything_down(
    tiny_target: dict[str, Path], tmp_path: Path
) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    out.mkdir()
    default_sigint()
    process = subprocess.Popen(
        _bench_command(tiny_target, out),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(home),
    )  # fmt: skip
    assert process.stderr is not None
    said = []
    deadline = time.monotonic() + 120
    for line in process.stderr:  # wait until it measures its third configuration
        said.append(line)
        if THIRD.match(line) or time.monotonic() > deadline:
            break
    assert any(THIRD.match(line) for line in said), "".join(said)[-3000:]
    ours = f"{PREFIX}{process.pid}-"
    if sys.platform == "linux" and os.geteuid() == 0:  # a namespace per worker (and a hub's)
        assert len([name for name in _namespaces() if name.startswith(ours)]) >= 2
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(said)[-2000:] + rest[-3000:]
    assert "interrupted" in rest
    record = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    assert record["interrupted"] is True
    assert len(record["configurations"]) >= 2  # what ran before Ctrl+C is kept
    assert not any(name.startswith(ours) for name in _namespaces())
    time.sleep(0.5)
    assert _workers_of(home) == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--delays", "0,abc"], "need milliseconds"),
        (["--delays", "0,-5"], "a delay must be 0 to"),
        (["--ks", "0,auto"], "each K must be 1 to 16 or auto"),
        (["--workers", "0"], "local workers: 1 to 16"),
        (["--tokens", "1"], "a decode rate needs 2 to"),
        (["--plot", "out.jpg"], "give a .png file"),
        (["--json", "no/such/folder/out.json"], "does not exist"),
        (["--loss", "100"], "a loss below 100 %"),
        (["--workers", "10.0.0.9:7000", "--delays", "0,25"], "added delay needs local workers"),
        (["--baseline", "{target}"], "give a monolithic one"),
        (["--draft", "{missing}"], "is not a folder"),
        (["{mono}"], "is a monolithic export; benchmark a stage export"),
        (["--modes", "pp,sd"], "each mode must be one of"),
        (["--no-ngram"], "give one with --draft DIR"),
        (["--draft", "{target}", "--no-ngram", "--modes", "pp"], "no speculative mode"),
    ],
)
def test_a_bad_flag_is_one_clear_error_before_any_work(
    args: list[str],
    said: str,
    tiny_target: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fleetgui.cli import main

    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    values = {
        "target": str(tiny_target["target"]),
        "mono": str(tiny_target["mono"]),
        "missing": str(tmp_path / "nothing"),
    }
    argv = [a.format(**values) for a in args]
    target = [] if argv[0] == values["mono"] else [values["target"]]
    started = time.monotonic()
    try:
        code = main(["bench", *target, *argv])
    except SystemExit as exit_info:  # argparse: a usage error
        code = int(exit_info.code or 0)
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert said in err, err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err
    assert time.monotonic() - started < 10  # refused before any worker started
    assert not (tmp_path / "home" / "bench-fleets").exists()
