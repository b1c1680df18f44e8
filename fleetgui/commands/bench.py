"""``fleetgui bench``: benchmarks that print side-by-side figures."""

from __future__ import annotations

import argparse

from fleetgui.errors import NotAvailableError

NAME = "bench"
HELP = "run a benchmark and print its figures"
DESCRIPTION = "Run a benchmark (measured side by side in one run) and print its figures."
BENCHMARKS = ("export", "runtime", "fleet", "planner", "demo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=BENCHMARKS, help="which benchmark")
    parser.add_argument("--json", action="store_true", help="print figures as JSON")


def run(args: argparse.Namespace) -> int:
    raise NotAvailableError(f"the {args.name} benchmark is not available in this version yet")
