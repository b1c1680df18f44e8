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
    "fleetgui.training",
    "fleetgui.export",
    "fleetgui.library",
    "fleetgui.assembler",
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


def _room_of(module: str) -> str:
    """The sub-package of ``fleetgui.fleet`` a module is in (``fleetgui.fleet.ring``), or the
    top-level package (``fleetgui.app``)."""
    parts = module.split(".")
    room = parts[:2] == ["fleetgui", "fleet"] and len(parts) > 2
    depth = 3 if room and (PACKAGE / "fleet" / parts[2]).is_dir() else 2
    return ".".join(parts[:depth])


def test_the_fleet_rooms_and_packages_import_without_cycles() -> None:
    """No cycle between fleetgui's packages, nor between ``fleetgui.fleet``'s sub-packages
    (ring, session, placement, ...): every import counts, also inside functions and under
    TYPE_CHECKING."""
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        source = _room_of(module.removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                target = _room_of(name)
                if name.startswith("fleetgui.") and target != source:
                    edges.setdefault(source, set()).add(target)
    cycles = []
    for start in edges:  # a depth-first walk from each package: small graph, plain code
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for after in edges.get(node, ()):
                if after == start:
                    cycles.append(" -> ".join([*trail, after]))
                elif after not in trail:
                    stack.append((after, [*trail, after]))
    assert cycles == []
