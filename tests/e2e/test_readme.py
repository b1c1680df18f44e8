"""The README stays true: its two commands are where CI reads them, its CLI table is real."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fleetgui.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/e2e/ is two below
README = (ROOT / "README.md").read_text(encoding="utf-8")


def fenced_block_after(marker: str) -> str:
    match = re.search(rf"<!-- {marker} -->\s*```(?:sh|bash)?\n(.+?)\n```", README, re.S)
    assert match, f"README has no fenced block after <!-- {marker} -->"
    return match.group(1).strip()


def test_readme_opens_with_exactly_two_commands() -> None:
    blocks_before_first_heading = README.split("\n## ", 1)[0].count("```sh")
    assert blocks_before_first_heading == 2
    main_command = fenced_block_after("main-command")
    test_command = fenced_block_after("test-command")
    for command in (main_command, test_command):
        assert "\n" not in command, "each command must be one line to copy"
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install ")
        assert ' -e ".[all' in command  # an editable install of the checkout
    assert ".venv/bin/fleetgui" in main_command
    assert ".venv/bin/pytest" in test_command
    assert ".venv/bin/ruff check ." in test_command and ".venv/bin/mypy" in test_command


def test_ci_runs_the_readme_test_command() -> None:
    script = ROOT / ".ci" / "run"
    # .ci/run extracts the command from the README; check it finds the same one.
    extractor = re.search(r"python3 - <<'PY'\n(.+?)\nPY", script.read_text(), re.S)
    assert extractor, ".ci/run no longer extracts the command from README.md"
    result = subprocess.run(
        ["python3", "-c", extractor.group(1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == fenced_block_after("test-command")


def test_every_command_in_the_cli_is_documented() -> None:
    table = README.split("## Command line", 1)[1]
    for command in COMMANDS:
        assert f"| `{command.NAME}" in table, f"README's CLI table lacks {command.NAME}"
