"""``fleetgui generate``: PP+MB runs several streams interleaved across the stages with plain
decoding (no draft); with ``--workers`` on real worker processes it pins their keys, gives the
local greedy tokens, refuses a worker whose key changed and names a closed port. (A fleet that
loses its workers mid-answer: ``tests/fleet/session/test_failover.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from fleet_support import WorkerProcess
from runtime_support import TINY_PROMPTS

from fleetgui.net.keys import KeyPair
from fleetgui.worker.service import free_port_pair

PROMPTS = TINY_PROMPTS
N_NEW = 96  # PP+MB's streams: long enough to overlap
N_NEW_ON_WORKERS = 40
CLOSE = 0.003  # the draft's noise: it nearly always agrees


def _generate(home: Path, export_dir: Path, mode: str, *prompts: str) -> list[dict[str, Any]]:
    args = [arg for prompt in prompts for arg in ("--prompt", prompt)]
    run = subprocess.run(
        [sys.executable, "-m", "fleetgui", "generate", str(export_dir), *args, "--mode", mode,
         "--max-new-tokens", str(N_NEW), "--precision", "f32", "--threads", "1", "--json"],
        capture_output=True, text=True, env={**os.environ, "FLEETGUI_HOME": str(home)},
        timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines()]


def _busy_s(record: dict[str, Any]) -> float:
    """How long a stream generated: its first token, then the rest at its decode rate."""
    return record["ttft_ms"] / 1000 + (len(record["token_ids"]) - 1) / record["tokens_per_s"]


@pytest.mark.slow  # two generate processes: about 10 s
def test_generate_pp_mb_runs_the_prompts_at_once_with_pp_s_tokens(
    tiny_export: Callable[..., Path], tmp_path: Path
) -> None:
    export_dir = tiny_export(2)
    *plain, plain_total = _generate(tmp_path, export_dir, "pp", *PROMPTS)
    *mb, mb_total = _generate(tmp_path, export_dir, "pp+mb", *PROMPTS)
    assert [r["token_ids"] for r in mb] == [r["token_ids"] for r in plain]  # greedy, unchanged
    assert "acceptance_rate" not in mb[0]  # plain decoding: no draft
    # one after the other, the wall time covers both streams' times; at once, they overlap
    assert plain_total["wall_s"] >= 0.9 * sum(_busy_s(r) for r in plain)
    assert mb_total["wall_s"] < 0.75 * sum(_busy_s(r) for r in mb)


@pytest.mark.slow
def test_generate_cli_on_workers_pins_keys(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    live_workers: list[WorkerProcess],
    root: Path,
    identity_dir: Path,
) -> None:
    references = {p: tiny_greedy(p, N_NEW_ON_WORKERS) for p in PROMPTS}
    home = root / "cli-home"
    addresses = ",".join(w.address for w in live_workers[:2])
    common = ["--identity", str(identity_dir), "--precision", "f32", "--threads", "1"]
    for mode in ("pp", "pp+sd"):
        draft = ["--draft", str(tiny_export(1, draft=CLOSE)), "--k", "2"] if mode != "pp" else []
        run = run_cli(
            home,
            "generate",
            str(tiny_export(3)),
            "--prompt",
            PROMPTS[0],
            "--max-new-tokens",
            str(N_NEW_ON_WORKERS),
            "--mode",
            mode,
            "--workers",
            addresses,
            "--json",
            *common,
            *draft,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        record = json.loads(run.stdout.splitlines()[0])
        assert record["token_ids"] == references[PROMPTS[0]]
        assert set(record) >= {"text", "token_ids", "ttft_ms", "tokens_per_s"}
    pinned = json.loads((home / "config" / "known_workers.json").read_text())["workers"]
    assert {entry["name"] for entry in pinned.values()} == {"w1", "w2"}


@pytest.mark.slow
def test_generate_cli_refuses_a_changed_worker_key_and_names_a_closed_port(
    tiny_export: Callable[..., Path],
    live_workers: list[WorkerProcess],
    root: Path,
    identity_dir: Path,
) -> None:
    home = root / "cli-changed"
    known = home / "config" / "known_workers.json"
    known.parent.mkdir(parents=True, exist_ok=True)
    w1 = live_workers[0]
    other = KeyPair.generate().public
    entry = {"public_key": other, "name": "w1", "address": w1.address, "pinned_at": "x"}
    known.write_text(json.dumps({"version": 1, "workers": {f"w1@{w1.address}": entry}}))
    args = ["generate", str(tiny_export(2)), "--prompt", "x", "--max-new-tokens", "2"]
    identity = ["--identity", str(identity_dir)]
    run = run_cli(home, *args, "--workers", w1.address, *identity)
    assert run.returncode == 1
    assert "CHANGED" in run.stderr and "known_workers.json" in run.stderr
    closed = free_port_pair()
    run = run_cli(home, *args, "--workers", f"127.0.0.1:{closed}", *identity)
    assert run.returncode == 1
    assert "closed" in run.stderr.lower()
