"""``fleetgui bench``: benchmarks that print side-by-side figures.

Benchmarks are the scripts ``benchmarks/bench_NAME.py`` of a source checkout (they build their
models with the test-model factory in ``tests/``); this command runs one with this Python.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from fleetgui.errors import FleetguiError
from fleetgui.paths import checkout_root

NAME = "bench"
HELP = "run a benchmark and print its figures"
DESCRIPTION = (
    "Run benchmarks/bench_NAME.py from the source checkout (measured side by side in one run) "
    "and print its figures. Arguments after NAME go to the benchmark (see NAME --help)."
)


def available() -> list[str]:
    """Benchmark names in the checkout, e.g. ``export``, ``export-memory``."""
    root = checkout_root()
    if root is None:
        return []
    return sorted(
        p.stem.removeprefix("bench_").replace("_", "-")
        for p in (root / "benchmarks").glob("bench_*.py")
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="benchmark: " + ", ".join(available()))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")


def run(args: argparse.Namespace) -> int:
    root = checkout_root()
    if root is None:
        raise FleetguiError("benchmarks run from a source checkout of fleetgui (benchmarks/)")
    if args.name not in available():
        raise FleetguiError(
            f"no benchmark named {args.name!r}; available: {', '.join(available())}"
        )
    script = root / "benchmarks" / f"bench_{args.name.replace('-', '_')}.py"
    return subprocess.run(
        [sys.executable, str(script), *args.args], cwd=script.parent, check=False
    ).returncode
