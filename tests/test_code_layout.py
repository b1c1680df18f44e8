"""The package's shape: small modules, and folders whose imports do not go round in a circle.

A folder is a room of one concept; if two rooms import each other (directly, or through a third),
neither can be read, moved or tested alone. Every import counts, those inside functions and
under ``TYPE_CHECKING`` too: they are dependencies all the same.
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fleetgui"
MAX_MODULE_LINES = 400


def _modules() -> dict[str, Path]:
    """Every module and package of fleetgui by dotted name."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The fleetgui modules (or packages) each module imports."""

    def known(name: str) -> str | None:  # the longest prefix that is a module or a package
        parts = name.split(".")
        return next(
            (
                ".".join(parts[:n])
                for n in range(len(parts), 0, -1)
                if ".".join(parts[:n]) in modules
            ),
            None,
        )

    found: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                continue
            for target in filter(None, map(known, imported)):
                if target != name and target.startswith("fleetgui"):
                    found[name].add(target)
    return found


def _cycles(edges: dict[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                yield from visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                yield sorted(component)

    for node in sorted(edges):
        if node not in index:
            yield from visit(node)


def package_cycles() -> list[tuple[str, list[str]]]:
    """Cycles among the children (sub-packages and modules) of each package that take in a
    sub-package: a room that imports a neighbour which imports it back. (A cycle of modules in
    one folder is that room's own business.)"""
    modules = _modules()
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    imports = _imports(modules)
    found = []
    for package in sorted(packages):

        def child(name: str, package: str = package) -> str | None:
            if not name.startswith(package + "."):
                return None
            return f"{package}.{name[len(package) + 1 :].split('.', maxsplit=1)[0]}"

        edges: dict[str, set[str]] = collections.defaultdict(set)
        for name, targets in imports.items():
            source = child(name)
            for target in filter(None, map(child, targets)):
                if source is not None and target != source:
                    edges[source].add(target)
        found += [(package, c) for c in _cycles(edges) if packages.intersection(c)]
    return found


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these by idea: {long}"


def test_no_two_rooms_import_each_other() -> None:
    assert package_cycles() == []


@pytest.mark.parametrize(
    ("imports", "cycle"),
    [
        ({"a.x": {"a.y.m"}, "a.y.m": {"a.x"}}, ["a.x", "a.y"]),  # a room and a module by it
        ({"a.x.m": {"a.y.m"}, "a.y.m": {"a.z.m"}, "a.z.m": {"a.x.m"}}, ["a.x", "a.y", "a.z"]),
        ({"a.x.m": {"a.y.m"}, "a.y.m": set()}, None),  # one way only
    ],
)
def test_the_check_finds_a_cycle_through_rooms(
    imports: dict[str, set[str]], cycle: list[str] | None
) -> None:
    """``_cycles`` on children's edges as ``package_cycles`` builds them (package ``a``)."""
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for source, targets in imports.items():
        for target in targets:
            edges[".".join(source.split(".")[:2])].add(".".join(target.split(".")[:2]))
    assert list(_cycles(edges)) == ([cycle] if cycle else [])
