"""Start-up shared by the bundles' entry scripts (``worker_entry.py``, ``app_entry.py``)."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Sequence

#: ``fleetgui`` options that come before the command (see ``fleetgui/cli.py``).
GLOBAL_OPTIONS_WITH_VALUE = ("--log-level",)
GLOBAL_FLAGS = ("--version", "-h", "--help")


def split_global_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Leading global options (``--log-level debug``, ``--log-level=debug``, ``--version``) and
    the rest of ``argv``."""
    front: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest[0]
        if arg in GLOBAL_OPTIONS_WITH_VALUE and len(rest) > 1:
            front += rest[:2]
            rest = rest[2:]
        elif arg.split("=", 1)[0] in GLOBAL_OPTIONS_WITH_VALUE or arg == "--version":
            front.append(arg)
            rest = rest[1:]
        else:
            break
    return front, rest


def prepare_process() -> None:
    """What every frozen fleetgui process does first.

    * ``multiprocessing.freeze_support()``: a child process started by ``spawn`` (Windows) runs
      the executable again; this makes it run the child's job instead of ``main``.
    * A windowed Windows executable has no ``sys.stdout``/``sys.stderr`` (they are None); give
      it ``os.devnull`` so printing and logging to the console are harmless no-ops. The log file
      in the log folder still gets everything.
    """
    multiprocessing.freeze_support()
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
