"""The ``fleetgui`` command line: one subcommand per job, each with ``--help``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from fleetgui import __version__
from fleetgui.commands import COMMANDS
from fleetgui.errors import FleetguiError
from fleetgui.logging_setup import LEVELS, configure_logging

log = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The full parser: global options and every subcommand's own options."""
    parser = _Parser(
        prog="fleetgui",
        description="Turn a fleet of Intel AI PCs into one private LLM server.",
    )
    parser.add_argument("--version", action="version", version=f"fleetgui {__version__}")
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default="info",
        help="least severe messages to log, to stderr and to the log folder (default: info)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for command in COMMANDS:
        command_parser = sub.add_parser(
            command.NAME, help=command.HELP, description=command.DESCRIPTION
        )
        command.add_arguments(command_parser)
        command_parser.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen subcommand and return the process exit code."""
    args = build_parser().parse_args(argv)
    log_file = configure_logging(args.log_level, process=args.command)
    log.debug("fleetgui %s %s, logging to %s", __version__, args.command, log_file)
    try:
        return int(args.run(args))
    except FleetguiError as exc:
        log.debug("command failed", exc_info=True)
        print(f"fleetgui {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"fleetgui {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())


def _qt_app_ran() -> bool:
    widgets = sys.modules.get("PySide6.QtWidgets")
    return widgets is not None and widgets.QApplication.instance() is not None


def exit_process(code: int) -> NoReturn:
    """End the process with ``code``. After the Qt app ran (``gui``, ``demo``), the process ends
    without the interpreter's teardown (logs and output flushed, then ``os._exit``): by then the
    app has saved its state and stopped its workers, and tearing down Qt, OpenVINO and the
    other extension modules in the interpreter's order aborted the process (a C extension's
    refcount error on a bool, exit 134) after ``fleetgui demo --screenshot`` had finished."""
    if _qt_app_ran():
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def entry() -> NoReturn:
    """The ``fleetgui`` command: :func:`main` with the process's arguments, then exit."""
    exit_process(main())
