"""The app's settings (``config_dir()/settings.json``, written atomically) and its secrets (the OS
keyring; never in the settings file)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from PySide6.QtCore import QObject, Signal

from fleetgui.app.mode import MAX_STREAMS, ModeSettings
from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text
from fleetgui.generation_config import K_MAX, K_MIN
from fleetgui.keyring_access import (
    KEYRING_SERVICE,
    KeyringUnavailableError,
    delete_secret,
    get_secret,
    set_secret,
)
from fleetgui.modes import Mode
from fleetgui.paths import config_dir
from fleetgui.runtime.draft_source import parse_draft

log = logging.getLogger(__name__)

SETTINGS_NAME = "settings.json"
WEIGHTS = ("int4", "int8", "fp16", "fp32")


@dataclass(frozen=True)
class AppSettings:
    """Everything the app remembers between runs (no secrets)."""

    model_dir: str = ""  # last HuggingFace model folder or export chosen
    draft_dir: str = ""  # draft export for PP+SD, or "ngram"
    mode: str = Mode.PP.value  # pp, pp+sd or pp+sd+mb
    k: int = 0  # draft tokens per round; 0: auto
    streams: int = 2  # concurrent conversations in PP+SD+MB
    export_weights: str = "int4"  # weight format of exports made from the app
    export_stages: int = 2  # stages of exports made from the app
    objective: str = "latency"  # planner objective: latency or throughput
    model_folders: tuple[str, ...] = ()  # folders the user added to the model library
    context: int = 0  # tokens a prompt and its answer may hold; 0: the model's, at most 4,096
    kv_reuse: bool = True  # conversations' KV stays on the fleet between turns
    kv_budget_mb: int = 0  # MB of idle conversations' KV per PC; 0: half of its free memory

    def mode_settings(self) -> ModeSettings:
        """The mode these settings describe; invalid saved values fall back to defaults."""
        try:
            mode = Mode(self.mode)
        except ValueError:
            mode = Mode.PP
        k: int | Literal["auto"] = self.k if K_MIN <= self.k <= K_MAX else "auto"
        streams = min(max(self.streams, 1), MAX_STREAMS)
        draft = parse_draft(self.draft_dir) if self.draft_dir else None
        return ModeSettings(mode, k, draft, streams)

    @classmethod
    def from_dict(cls, data: Any) -> AppSettings:
        """Known fields of the right type are taken; anything else is ignored (and logged)."""
        if not isinstance(data, dict):
            return cls()
        defaults = cls()
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name, getattr(defaults, f.name))
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = tuple(value)  # JSON has no tuples; lists of text are saved as lists
            if type(value) is type(getattr(defaults, f.name)):
                values[f.name] = value
            else:
                log.warning("settings: ignoring %s=%r (wrong type)", f.name, value)
        return cls(**values)


class Settings(QObject):
    """The current ``AppSettings``; every change is saved at once."""

    changed = Signal(object)  # AppSettings

    def __init__(self, path: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = Path(path) if path is not None else config_dir() / SETTINGS_NAME
        self._values = self._load()

    @property
    def values(self) -> AppSettings:
        return self._values

    def _load(self) -> AppSettings:
        if not self.path.is_file():
            return AppSettings()
        try:
            return AppSettings.from_dict(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            log.warning("settings file %s unreadable (%s): using defaults", self.path, exc)
            return AppSettings()

    def update(self, **changes: Any) -> None:
        """Change some settings and save them; raises ``TypeError`` for an unknown name."""
        values = replace(self._values, **changes)
        if values == self._values:
            return
        self._values = values
        try:
            atomic_write_text(self.path, json.dumps(asdict(values), indent=2))
        except OSError as exc:
            log.error("could not save settings to %s: %s", self.path, exc)
        self.changed.emit(values)

    def set_mode(self, mode: ModeSettings) -> None:
        self.update(
            mode=mode.mode.value,
            k=0 if mode.k == "auto" else mode.k,
            streams=mode.streams,
            draft_dir=str(mode.draft_dir) if mode.draft_dir else "",
        )


class SecretError(FleetguiError):
    """A secret could not be stored in the OS keyring."""


class Secrets:
    """Secrets (the coordinator's private key, pairing tokens) in the OS keyring."""

    def __init__(self, service: str = KEYRING_SERVICE) -> None:
        self.service = service

    def get(self, name: str) -> str | None:
        """The secret, or None if absent or no keyring is available (logged)."""
        try:
            return get_secret(name, self.service)
        except KeyringUnavailableError as exc:
            log.warning("keyring unavailable, secret %s not read: %s", name, exc)
            return None

    def set(self, name: str, value: str) -> None:
        try:
            set_secret(name, value, self.service)
        except KeyringUnavailableError as exc:
            raise SecretError(
                f"the OS keyring refused to store {name!r} ({exc}): unlock the keyring, or on "
                "Linux install and start a Secret Service (e.g. gnome-keyring)"
            ) from exc

    def delete(self, name: str) -> None:
        try:
            delete_secret(name, self.service)  # already gone is not an error
        except KeyringUnavailableError as exc:
            log.warning("keyring unavailable, secret %s not deleted: %s", name, exc)
