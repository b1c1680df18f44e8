"""Install the compiled installer silently under Wine, check that everything
``windows/fleetgui.iss`` promises is in place, uninstall it silently and check what goes and what
stays.

Looked at from outside, as a user would: the files of both bundles (byte for byte), the
Start-menu and desktop shortcuts (what each starts), the registry (the worker's Run value, the
uninstaller's entry with version and publisher, read with ``reg query``), and the firewall rules.
Wine has no firewall, so the netsh commands are read from the setup's and uninstaller's own logs
(``/LOG``), which record every program they run with its arguments. User data planted before the
uninstall must survive it (a silent uninstall keeps it).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from inno_setup import Payload
from installer_promise import (
    RUN_KEY,
    RUN_VALUE,
    TASKS,
    UNINSTALL_KEY,
    Folders,
    Promise,
    file_tree,
)
from shell_link import ShellLink, read_shell_link
from wine import WineError, WinePrefix, windows_path

log = logging.getLogger(__name__)

SETUP_TIMEOUT_S = 1800
_SILENT = ("/VERYSILENT", "/SUPPRESSMSGBOXES", "/NORESTART")
# Setup logs "Filename: X" then "Parameters: Y" for a [Run] entry; the uninstaller logs
# "Running Exec filename: X" then "Running Exec parameters: Y".
_LOG_PROGRAM = re.compile(r"^\S+ \S+\s+(?:Filename|Running Exec filename): (.+)$")
_LOG_PARAMETERS = re.compile(r"^\S+ \S+\s+(?:Parameters|Running Exec parameters): (.*)$")


@dataclass(frozen=True)
class Observation:
    """What is on the Windows of the prefix after a step, looked at from outside."""

    app_dir_exists: bool
    files: dict[str, str]  # under the install folder: relative path -> sha256
    #: the .lnk files in the Start-menu group and fleetgui's on the desktop
    shortcuts: dict[str, ShellLink]
    run_value: str | None
    uninstall_entry: dict[str, str] | None
    commands: list[str]  # programs the step ran, from its log: "netsh.exe advfirewall ..."
    user_data: dict[str, str | None]  # the planted files' text (None: gone)


def programs_run(log_path: Path) -> list[str]:
    """Programs an Inno Setup log says were run: ``"name.exe arguments"`` each."""
    commands: list[str] = []
    for line in log_path.read_text(encoding="utf-8-sig", errors="replace").splitlines():
        if program := _LOG_PROGRAM.match(line):
            commands.append(PureWindowsPath(program.group(1).strip()).name)
        elif (parameters := _LOG_PARAMETERS.match(line)) and commands:
            commands[-1] = f"{commands[-1]} {parameters.group(1).strip()}"
    return commands


def observe(wine: WinePrefix, promise: Promise, log_path: Path) -> Observation:
    app_dir = wine.unix_path(promise.app_dir)
    group = promise.folders.start_menu_group
    links = [rf"{group}\{link.name}" for link in wine.unix_path(group).glob("*.lnk")]
    links.append(rf"{promise.folders.desktop}\fleetgui.lnk")
    shortcuts = {
        link: read_shell_link(wine.unix_path(link))
        for link in sorted(links)
        if wine.unix_path(link).is_file()
    }
    run_values = wine.reg_query(RUN_KEY) or {}
    user_data: dict[str, str | None] = {}
    for path in promise.user_data():
        unix = wine.unix_path(path)
        user_data[path] = unix.read_text(encoding="utf-8") if unix.is_file() else None
    return Observation(
        app_dir_exists=app_dir.exists(),
        files=file_tree(app_dir) if app_dir.is_dir() else {},
        shortcuts=shortcuts,
        run_value=run_values.get(RUN_VALUE),
        uninstall_entry=wine.reg_query(UNINSTALL_KEY),
        commands=programs_run(log_path),
        user_data=user_data,
    )


def install_problems(promise: Promise, seen: Observation) -> list[str]:
    """What the install did not do as promised (empty: all of it)."""
    app, files = promise.app_dir, promise.files()
    problems = [f"{app} was not created"] if not seen.app_dir_exists else []
    for name, digest in files.items():
        if name not in seen.files:
            problems.append(rf"missing file {app}\{PureWindowsPath(name)}")
        elif digest is not None and seen.files[name] != digest:
            problems.append(rf"{app}\{PureWindowsPath(name)} differs from the bundle's file")
    problems += [
        rf"unexpected file {app}\{PureWindowsPath(name)}"
        for name in sorted(set(seen.files) - set(files))
    ]
    for path, link in promise.shortcuts().items():
        found = seen.shortcuts.get(path)
        if found is None:
            problems.append(f"missing shortcut {path}")
        elif not found.same_as(link):
            problems.append(f"shortcut {path} starts {found}, not {link}")
    problems += [
        f"unexpected shortcut {path}"
        for path in sorted(set(seen.shortcuts) - set(promise.shortcuts()))
    ]
    if seen.run_value != promise.run_value():
        problems.append(
            f"{RUN_KEY} {RUN_VALUE!r} is {seen.run_value!r}, not {promise.run_value()!r}"
        )
    entry = seen.uninstall_entry
    if entry is None:
        problems.append(f"no uninstaller entry {UNINSTALL_KEY}")
    else:
        problems += [
            f"uninstaller entry {name} is {entry.get(name)!r}, not {value!r}"
            for name, value in promise.uninstall_entry().items()
            if entry.get(name) != value
        ]
    problems += [
        f"the setup did not run {command}"
        for command in promise.firewall_rules_added()
        if command not in seen.commands
    ]
    return problems


def uninstall_problems(promise: Promise, seen: Observation) -> list[str]:
    """What the uninstall left that it should have removed, or removed that it should have
    kept (empty: as promised)."""
    problems = [f"{promise.app_dir} is still there"] if seen.app_dir_exists else []
    problems += [rf"left {promise.app_dir}\{PureWindowsPath(name)}" for name in sorted(seen.files)]
    problems += [f"left shortcut {path}" for path in sorted(seen.shortcuts)]
    if seen.run_value is not None:
        problems.append(f"left {RUN_KEY} {RUN_VALUE!r} = {seen.run_value!r}")
    if seen.uninstall_entry is not None:
        problems.append(f"left the uninstaller entry {UNINSTALL_KEY}")
    problems += [
        f"the uninstaller did not run {command}"
        for command in promise.firewall_rules_deleted()
        if command not in seen.commands
    ]
    problems += [
        f"user data {path} was {'deleted' if seen.user_data.get(path) is None else 'changed'}"
        for path, text in promise.user_data().items()
        if seen.user_data.get(path) != text
    ]
    return problems


@dataclass(frozen=True)
class CheckReport:
    """What the installer did under Wine, and which promises it broke."""

    setup: Path
    promise: Promise
    installed: Observation
    removed: Observation
    install_problems: list[str]
    uninstall_problems: list[str]
    seconds: dict[str, float]  # "install", "uninstall"

    @property
    def problems(self) -> list[str]:
        return self.install_problems + self.uninstall_problems

    def __str__(self) -> str:
        size = self.setup.stat().st_size / 1e6
        lines = [
            f"{self.setup.name} ({size:.1f} MB): installed {len(self.installed.files)} files and "
            f"{len(self.installed.shortcuts)} shortcuts in {self.seconds['install']:.0f} s, "
            f"uninstalled in {self.seconds['uninstall']:.0f} s",
            *(f"PROBLEM: {problem}" for problem in self.problems),
            f"{len(self.problems)} problems" if self.problems else "every promise held",
        ]
        return "\n".join(lines)


def _run_silently(wine: WinePrefix, program: str, log_path: Path, *arguments: str) -> float:
    started = time.monotonic()
    log_arg = f"/LOG={windows_path(log_path)}"
    result = wine.run(
        [program, *_SILENT, *arguments, log_arg], timeout_s=SETUP_TIMEOUT_S, check=False
    )
    wine.wait(SETUP_TIMEOUT_S)  # the uninstaller goes on in a copy of itself
    if result.returncode != 0:
        tail = log_path.read_text(encoding="utf-8-sig")[-3000:] if log_path.is_file() else ""
        raise WineError(f"{program} exited with {result.returncode}; its log ends:\n{tail}")
    return time.monotonic() - started


def check_installer(setup: Path, payload: Payload, wine: WinePrefix, logs: Path) -> CheckReport:
    """Install ``setup`` into ``wine`` (a prefix without fleetgui), check, uninstall, check.
    The setup's and uninstaller's logs are written into ``logs``."""
    promise = Promise(payload, Folders.of(wine))
    if wine.unix_path(promise.app_dir).exists():
        raise WineError(f"{promise.app_dir} exists already in {wine.path}: use a fresh prefix")
    logs.mkdir(parents=True, exist_ok=True)
    arguments = (f"/DIR={promise.app_dir}", f"/TASKS={TASKS}")
    seconds = {
        "install": _run_silently(wine, windows_path(setup), logs / "install.log", *arguments)
    }
    installed = observe(wine, promise, logs / "install.log")
    for path, text in promise.user_data().items():
        unix = wine.unix_path(path)
        unix.parent.mkdir(parents=True, exist_ok=True)
        unix.write_text(text, encoding="utf-8")
    uninstaller = rf"{promise.app_dir}\unins000.exe"
    seconds["uninstall"] = _run_silently(wine, uninstaller, logs / "uninstall.log")
    removed = observe(wine, promise, logs / "uninstall.log")
    return CheckReport(
        setup,
        promise,
        installed,
        removed,
        install_problems(promise, installed),
        uninstall_problems(promise, removed),
        seconds,
    )
