"""``fleetgui pair``: a worker started with --pair trusts a coordinator once it was given the
code the worker printed (and not before, nor with a wrong code)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_cli
from fleet_support import worker_process
from runtime_support import TINY_PROMPTS

pytestmark = pytest.mark.slow

N_NEW = 40
PROMPTS = TINY_PROMPTS


def test_pairing_code_makes_a_worker_trust_a_coordinator(
    tiny_export: Callable[..., Path], tiny_greedy: Callable[[str, int], list[int]], root: Path
) -> None:
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}
    folder = root / "pairing"
    folder.mkdir()
    keys_file = folder / "authorized_keys"  # empty: the worker trusts nobody yet
    identity_dir = folder / "new-coordinator"
    assert run_cli(folder / "home", "keys", "--out", str(identity_dir)).returncode == 0
    worker = worker_process(folder, "p1", keys_file, extra=["--pair"]).start()
    try:
        printed = "".join(worker.lines)
        code = printed.split("pairing code for p1: ")[1].split()[0]
        identity = ["--identity", str(identity_dir)]
        args = ["generate", str(tiny_export(2)), "--prompt", PROMPTS[0], "--json", "--threads", "1"]
        args += ["--precision", "f32", "--max-new-tokens", str(N_NEW), *identity]
        refused = run_cli(folder / "home", *args, "--workers", worker.address)
        assert refused.returncode == 1 and "not authorized" in refused.stderr
        wrong = run_cli(folder / "home", "pair", worker.address, "--code", "000000x", *identity)
        assert wrong.returncode == 1 and "wrong pairing code" in wrong.stderr
        time.sleep(0.6)  # the worker spaces out pairing attempts
        paired = run_cli(folder / "home", "pair", worker.address, "--code", code, *identity)
        assert paired.returncode == 0, paired.stderr
        public = (identity_dir / "coordinator.pub").read_text().split()[0]
        assert public in keys_file.read_text()
        run = run_cli(folder / "home", *args, "--workers", worker.address)
        assert run.returncode == 0, run.stderr[-2000:]
        assert json.loads(run.stdout.splitlines()[0])["token_ids"] == references[PROMPTS[0]]
    finally:
        worker.stop()
