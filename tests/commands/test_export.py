"""``fleetgui export``'s own output: the verification is shown once, naming the export's final
folder (it is verified in its hidden build folder, ``.NAME.partial``, before being moved)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_cli


@pytest.mark.slow  # a tiny export, verified: about 10 s
def test_the_verification_is_shown_once_with_the_final_folder(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = ("export", str(tiny_models("llama")), "--out", str(out), "--stages", "2")
    done = run_cli(tmp_path / "home", *args, "--weights", "fp32")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    summaries = [line for line in lines if "decode steps" in line]
    assert summaries == [f"{out}: 2 stage(s), fp32 weights, prefill + 32 decode steps"]
    assert [line for line in lines if line.strip().endswith("PASS")] == ["PASS"]
    assert (out / "manifest.json").is_file()


@pytest.mark.slow  # a tiny export with int8 weights: about 10 s
def test_stdout_holds_only_the_result_line(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    """A script reads what was exported from stdout: NNCF's compression tables and progress
    bars, the export's own progress and log lines all go to stderr."""
    out = tmp_path / "out"
    args = ("export", str(tiny_models("llama")), "--out", str(out), "--stages", "2")
    done = run_cli(tmp_path / "home", *args, "--weights", "int8", "--no-verify")
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    assert line.startswith("exported ") and f"to {out}: 2 stage(s), int8 weights" in line
    assert "Statistics of the bitwidth distribution" not in done.stderr  # said in one line
    assert "compressing weights to int8" in done.stderr  # the export's progress, logged
