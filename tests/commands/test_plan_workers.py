"""``fleetgui plan --workers``: this PC and real paired workers on loopback, measured now, planned
without a devices file; a worker that does not trust this coordinator keeps an estimate, and
the log says why."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import PLAN_KEYS, run_cli
from fleet_support import WorkerProcess


@pytest.fixture(scope="module")
def workers(start_workers: Callable[..., list[WorkerProcess]]) -> list[WorkerProcess]:
    return start_workers("plan-a", "plan-b")


def plan(
    home: Path, export: Path, workers: list[WorkerProcess], identity: Path
) -> tuple[dict[str, Any], str]:
    addresses = ",".join(w.address for w in workers)
    done = run_cli(
        home, "plan", str(export), "--workers", addresses, "--identity", str(identity), "--json"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)  # stdout is the plan alone
    assert set(doc) == PLAN_KEYS
    return doc, done.stderr


@pytest.mark.slow  # two workers time a stage of the tiny export: about 20 s
def test_paired_workers_are_measured_and_planned(
    tiny_export: Callable[..., Path],
    workers: list[WorkerProcess],
    identity_dir: Path,
    tmp_path: Path,
) -> None:
    doc, log = plan(tmp_path / "home", tiny_export(3), workers, identity_dir)
    planned = [d["name"] for d in doc["devices"]] + [d["name"] for d in doc["left_out"]]
    assert len(planned) == 3 and {"plan-a", "plan-b"} <= set(planned)
    assert doc["devices"][0]["start_layer"] == 0  # this PC first: it runs stage 0
    (measured,) = [line for line in log.splitlines() if "Layer times" in line]
    assert "Layer times measured on" in measured and "estimated" not in measured
    assert "plan-a" in measured and "plan-b" in measured and "stage_" in measured


@pytest.mark.slow
def test_a_worker_that_does_not_trust_this_coordinator_keeps_an_estimate(
    tiny_export: Callable[..., Path],
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    stranger = tmp_path / "stranger"
    made = run_cli(tmp_path / "home", "keys", "--out", str(stranger))
    assert made.returncode == 0, made.stderr
    doc, log = plan(tmp_path / "home", tiny_export(3), workers[:1], stranger)
    assert doc["devices"]  # a plan all the same, on this PC's measured time
    (said,) = [line for line in log.splitlines() if "Layer times" in line]
    assert "estimated for plan-a: " in said and "refused this coordinator's key" in said
    assert "fleetgui worker --pair" in said  # and how to fix it


def test_identity_without_workers_is_refused(tmp_path: Path) -> None:
    devices = tmp_path / "devices.json"
    devices.write_text("[]", encoding="utf-8")
    done = run_cli(
        tmp_path / "home", "plan", str(tmp_path), "--devices", str(devices),
        "--identity", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 1 and "--identity goes with --workers" in done.stderr
