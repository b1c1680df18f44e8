"""What ``windows/fleetgui.iss`` promises an administrator install with every task leaves on
Windows, and what it promises to remove and keep on a silent uninstall (packaging/README.md,
"What the installer does"), written out for the check in ``installer_check.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import bundle_config
from inno_setup import Payload, file_sha256
from shell_link import ShellLink
from wine import WinePrefix

# As fleetgui.iss writes them (its AppId, Run value, rule names, ports): change them together.
APP_DIR = r"C:\Program Files\fleetgui"  # the default {autopf}\fleetgui, given with /DIR
TASKS = "desktopicon,workerlogin,firewall"
RUN_KEY = r"HKLM\Software\Microsoft\Windows\CurrentVersion\Run"
RUN_VALUE = "fleetgui worker"
UNINSTALL_KEY = (
    r"HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall"
    r"\{6E1F0A52-3C4B-4F7D-9B8E-2A1D5C7F9E03}_is1"
)
FIREWALL_RULE = "fleetgui worker"
DISCOVERY_RULE = "fleetgui worker discovery (mDNS)"
WORKER_PORTS = "5555-5556"
#: Files the installer adds beside the bundles (None: any content).
EXTRA_FILES: dict[str, str | None] = {"unins000.exe": None, "unins000.dat": None}


def file_tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder``: relative path (with ``/``) -> sha256."""
    return {
        path.relative_to(folder).as_posix(): file_sha256(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@dataclass(frozen=True)
class Folders:
    """Windows folders of the prefix, as its programs see them."""

    start_menu_group: str  # the installer's Start-menu folder (all users)
    desktop: str  # the desktop of all users
    local_app_data: str
    app_data: str

    @classmethod
    def of(cls, wine: WinePrefix) -> Folders:
        program_data, public, local, roaming = wine.expand(
            "ProgramData", "PUBLIC", "LOCALAPPDATA", "APPDATA"
        )
        group = rf"{program_data}\Microsoft\Windows\Start Menu\Programs\fleetgui"
        return cls(group, rf"{public}\Desktop", local, roaming)


@dataclass(frozen=True)
class Promise:
    """What fleetgui.iss promises for an administrator install with every task."""

    payload: Payload
    folders: Folders
    version: str = field(default_factory=bundle_config.version)
    app_dir: str = APP_DIR

    def files(self) -> dict[str, str | None]:
        """Relative path under the install folder -> sha256 (None: any content)."""
        files: dict[str, str | None] = {
            **file_tree(self.payload.app),
            **{f"worker/{name}": digest for name, digest in file_tree(self.payload.worker).items()},
            "fleetgui.ico": file_sha256(bundle_config.ICON_ICO),
        }
        return {**files, **EXTRA_FILES}

    def shortcuts(self) -> dict[str, ShellLink]:
        app, group = self.app_dir, self.folders.start_menu_group
        gui = ShellLink(rf"{app}\fleetgui.exe", "", app)
        return {
            rf"{group}\fleetgui.lnk": gui,
            rf"{group}\fleetgui command line.lnk": ShellLink(
                r"C:\windows\system32\cmd.exe", "/K fleetgui-cli.exe --help", app
            ),
            rf"{group}\fleetgui worker (console).lnk": ShellLink(
                rf"{app}\worker\fleetgui-worker.exe", "", rf"{app}\worker"
            ),
            rf"{group}\Uninstall fleetgui.lnk": ShellLink(rf"{app}\unins000.exe", "", app),
            rf"{self.folders.desktop}\fleetgui.lnk": gui,
        }

    def run_value(self) -> str:
        return rf'"{self.app_dir}\worker\fleetgui-worker-background.exe"'

    def uninstall_entry(self) -> dict[str, str]:
        return {
            "DisplayName": f"fleetgui {self.version}",
            "DisplayVersion": self.version,
            "Publisher": bundle_config.COMPANY,
            "UninstallString": rf'"{self.app_dir}\unins000.exe"',
        }

    def firewall_rules_added(self) -> list[str]:
        add = "netsh.exe advfirewall firewall add rule"
        mdns = f'{add} name="{DISCOVERY_RULE}" dir=in action=allow protocol=UDP localport=5353'
        return [
            f'{add} name="{FIREWALL_RULE}" dir=in action=allow protocol=TCP '
            f"localport={WORKER_PORTS} profile=private,domain",
            *(
                rf'{mdns} program="{self.app_dir}\worker\{exe}" profile=private,domain'
                for exe in ("fleetgui-worker-background.exe", "fleetgui-worker.exe")
            ),
        ]

    def firewall_rules_deleted(self) -> list[str]:
        delete = "netsh.exe advfirewall firewall delete rule"
        return [f'{delete} name="{name}"' for name in (FIREWALL_RULE, DISCOVERY_RULE)]

    def user_data(self) -> dict[str, str]:
        """Files a user of fleetgui has (Windows path -> text), planted before the uninstall."""
        local, roaming = self.folders.local_app_data, self.folders.app_data
        return {
            rf"{local}\fleetgui\authorized_keys": "ssh-ed25519 AAAA coordinator\n",
            rf"{local}\fleetgui\Logs\fleetgui.log": "worker started\n",
            rf"{roaming}\fleetgui\settings.json": '{"theme": "dark"}\n',
        }
