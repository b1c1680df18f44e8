"""The command line: every subcommand is listed and has --help; usage errors are one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_cli

from fleetgui.cli import build_parser, main

SUBCOMMANDS = (
    "export",
    "verify",
    "generate",
    "worker",
    "plan",
    "demo-model",
    "demo",
    "gui",
    "bench",
)


def test_help_lists_every_subcommand(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    for name in SUBCOMMANDS:
        assert f"    {name} " in result.stdout, f"{name} missing from --help"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: fleetgui {name}")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["export", "model", "--out", "x", "--weights", "int3"], "invalid choice: 'int3'"),
        (["plan", "m", "--devices", "d.json", "--bogus-flag"], "unrecognized arguments"),
        (["--log-level", "loud", "plan"], "invalid choice: 'loud'"),
        (["export", "m", "--out", "x", "--stages", "2", "--layers", "0:1"], "not allowed with"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], expected: str, tmp_path: Path
) -> None:
    result = run_cli(tmp_path, *argv)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert result.stdout == ""


def test_python_dash_m_matches_console_script(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "--version")
    assert result.returncode == 0
    from fleetgui import __version__

    assert result.stdout.strip() == f"fleetgui {__version__}"


def test_logs_go_to_the_log_folder_and_stderr(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "--log-level", "debug", "keys", "--help")
    assert result.returncode == 0
    # --help exits before logging starts; a real command run must log to the file.
    result = run_cli(tmp_path, "--log-level", "debug", "bench", "no-such-bench")
    log_file = tmp_path / "logs" / "fleetgui.log"
    assert log_file.is_file()
    text = log_file.read_text(encoding="utf-8")
    assert "fleetgui" in text and "bench" in text
    assert "DEBUG" in result.stderr


def test_user_errors_print_a_message_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path))
    code = main(["bench", "no-such-bench"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    assert "fleetgui bench: error:" in err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--out", "FILE"), "is a file; give a folder"),
        (("--out", "DIR", "--stages", "0"), "--stages must be at least 1, not 0"),
    ],
    ids=["out is a file", "zero stages"],
)
def test_export_refuses_a_file_as_out_and_zero_stages_in_one_line(
    args: tuple[str, ...],
    said: str,
    tiny_models: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--out`` naming a file printed a traceback, and ``--stages 0`` exported unsplit."""
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path))
    (tmp_path / "FILE").write_text("mine")
    argv = [a if a not in ("FILE", "DIR") else str(tmp_path / a) for a in args]
    code = main(["export", str(tiny_models("llama")), *argv])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and said in err, err
    assert (tmp_path / "FILE").read_text() == "mine" and not (tmp_path / "DIR").exists()
