"""The log file: several processes append to it, so each line says when, and which one wrote it."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from fleetgui.logging_setup import configure_logging


def test_each_file_line_names_its_process_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path))
    path = configure_logging("info", process="worker")
    assert path is not None
    logging.getLogger("fleetgui.test").info("stage 1 ready")
    logging.getLogger("fleetgui.test").debug("not at info")
    for handler in logging.getLogger().handlers:
        handler.flush()
    (line,) = path.read_text().splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.fullmatch(
        stamp + rf" worker\[{os.getpid()}\] INFO +fleetgui\.test: stage 1 ready", line
    ), line


def test_an_unknown_level_is_named() -> None:
    with pytest.raises(ValueError, match=r"'loud'.*debug, info"):
        configure_logging("loud")
