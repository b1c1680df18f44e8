"""Entry script of the frozen app: ``fleetgui ARGS`` exactly as the ``fleetgui`` command, and
the desktop app (``fleetgui gui``) when started without arguments (the Start-menu shortcut)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from frozen_support import prepare_process


def app_argv(argv: Sequence[str]) -> list[str]:
    """``fleetgui`` arguments for the app binary's ``argv``."""
    return list(argv) or ["gui"]


def main() -> int:
    prepare_process()
    from fleetgui.cli import main as fleetgui_main

    return fleetgui_main(app_argv(sys.argv[1:]))


if __name__ == "__main__":
    from fleetgui.cli import exit_process

    exit_process(main())
