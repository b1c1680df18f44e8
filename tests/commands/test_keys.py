"""``fleetgui keys``: writes a coordinator identity, refuses to overwrite one without --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgui.cli import main
from fleetgui.net.keys import load_identity

pytestmark = pytest.mark.usefixtures("fleetgui_home")  # its log goes there, not to the user's


def test_keys_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "--out", str(tmp_path / "id")]) == 0
    out = capsys.readouterr().out
    pair = load_identity(tmp_path / "id")
    assert out.splitlines()[0] == pair.public and "coordinator.key" in out
    assert main(["keys", "--out", str(tmp_path / "id")]) == 1
    assert "--force" in capsys.readouterr().err
    assert load_identity(tmp_path / "id") == pair
    assert main(["keys", "--out", str(tmp_path / "id"), "--force"]) == 0
    assert load_identity(tmp_path / "id") != pair
