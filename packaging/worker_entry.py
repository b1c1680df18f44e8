"""Entry script of the frozen worker agent: ``fleetgui-worker ARGS`` is ``fleetgui worker ARGS``.

Global options may come first (``fleetgui-worker --log-level debug --listen 0.0.0.0:5555``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from frozen_support import prepare_process, split_global_options


def worker_argv(argv: Sequence[str]) -> list[str]:
    """``fleetgui`` arguments for the worker binary's ``argv``."""
    front, rest = split_global_options(argv)
    return [*front, "worker", *rest]


def main() -> int:
    prepare_process()
    from fleetgui.cli import main as fleetgui_main

    return fleetgui_main(worker_argv(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
