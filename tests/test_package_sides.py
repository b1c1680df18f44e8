"""The two sides of the fleet stay apart: the worker agent (``fleetgui.worker``) and what both
sides share (``fleetgui.net``) never import the coordinator's code, the app or torch, so a
worker PC runs a lean bundle and a reader can tell which code runs where."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fleetgui

PACKAGE = Path(fleetgui.__file__).parent
COORDINATOR_SIDE = (
    "fleetgui.fleet",
    "fleetgui.app",
    "fleetgui.api",
    "fleetgui.bench",
    "fleetgui.commands",
    "fleetgui.demo",
    "fleetgui.export",
    "fleetgui.library",
    "fleetgui.front_door",
)
HEAVY = ("torch", "transformers", "PySide6", "nncf", "optimum")


def _imports(package: str) -> dict[str, set[str]]:
    """Every module a package's files import (also inside functions), with who imports it."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                found.setdefault(name, set()).add(path.name)
    return found


def _offending(package: str, forbidden: tuple[str, ...]) -> dict[str, set[str]]:
    return {
        module: who
        for module, who in _imports(package).items()
        if any(module == f or module.startswith(f + ".") for f in forbidden)
    }


def test_the_worker_imports_no_coordinator_app_or_torch_code() -> None:
    assert _imports("worker"), "no imports found: the package moved?"
    assert _offending("worker", COORDINATOR_SIDE + HEAVY) == {}


def test_the_shared_net_code_imports_neither_side() -> None:
    assert _offending("net", COORDINATOR_SIDE + HEAVY + ("fleetgui.worker",)) == {}


def test_a_running_worker_service_loads_no_qt_or_torch() -> None:
    code = (
        "import sys, fleetgui.worker.service, fleetgui.worker.agent;"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"
