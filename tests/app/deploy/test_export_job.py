"""Exporting a model for the deployment view (``fleetgui.app.deploy.export_job``): an export made
for a plan gets its own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from fleetgui.app.deploy.export_job import default_export_dir


def test_an_export_made_for_a_plan_gets_its_own_folder(tmp_path: Path) -> None:
    assert default_export_dir(Path("m/tiny"), "int4", 2, tmp_path) == tmp_path / "tiny-int4-2s"
    assert default_export_dir(Path("m/tiny"), "int4", 2, tmp_path, layers="0:1,1:4") == (
        tmp_path / "tiny-int4-2s-0-1-4"
    )
