"""An in-memory stand-in for the OS keyring (a fake: this machine and CI have no Secret
Service). Importing this module needs the ``keyring`` package (the ``app`` extra)."""

from __future__ import annotations

from keyring.backend import KeyringBackend


class InMemoryKeyring(KeyringBackend):
    """Holds passwords in a dict, highest priority while installed."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.store.pop((service, username), None)
