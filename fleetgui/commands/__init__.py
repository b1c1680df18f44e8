"""One module per ``fleetgui`` subcommand: ``NAME``, ``HELP``, ``DESCRIPTION``,
``add_arguments(parser)`` and ``run(args) -> int``. Heavy imports happen inside ``run`` so that
``fleetgui --help`` stays fast and the worker never imports Qt or torch."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Protocol

from fleetgui.commands import (
    bench,
    demo,
    demo_model,
    export,
    generate,
    gui,
    keys,
    pair,
    plan,
    serve,
    verify,
    worker,
)


class Command(Protocol):
    NAME: str
    HELP: str
    DESCRIPTION: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


COMMANDS: Sequence[Command] = (
    demo,
    gui,
    generate,
    serve,
    export,
    verify,
    worker,
    keys,
    pair,
    plan,
    demo_model,
    bench,
)
