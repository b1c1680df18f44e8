"""Which coordinators a worker serves: its ``authorized_keys`` file and one-time pairing codes.

A worker trusts the coordinators listed in ``authorized_keys`` (``<key> <comment>`` lines, as
ssh does), or one that presents the worker's one-time pairing code (:class:`PairingCode`), which
adds its key to the file. The :class:`Authorizer` is the policy the ZAP handler and the message
gate of :mod:`secure_socket` consult; ring peers (the previous worker of the current ring) are
admitted for FORWARD only.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text
from fleetgui.net.keys import AUTHORIZED_KEYS, KeyFileError, fingerprint, is_key

logger = logging.getLogger(__name__)


class PairingError(FleetguiError):
    """A pairing attempt was refused (wrong, expired, used-up or no code)."""


@dataclass(frozen=True, slots=True)
class AuthorizedKey:
    """One trusted coordinator."""

    public_key: str
    comment: str = ""


def parse_authorized_keys(text: str, source: str = AUTHORIZED_KEYS) -> list[AuthorizedKey]:
    """Parse ``<key> [comment]`` lines; blank lines and ``#`` comments are skipped.

    ``#`` is a Z85 character, but never the first one of a key (a 5-character group's first
    character encodes at most ``(2**32 - 1) // 85**4 = 82``, and ``#`` is 84).
    """
    entries: list[AuthorizedKey] = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.strip().split(maxsplit=1)
        if not words or words[0].startswith("#"):
            continue
        if not is_key(words[0]):
            raise KeyFileError(
                f"{source} line {number}: {words[0][:50]!r} is not a CURVE public key (40 Z85 "
                f"characters, as in coordinator.pub); fix or delete the line"
            )
        entries.append(AuthorizedKey(words[0], words[1] if len(words) > 1 else ""))
    return entries


def read_authorized_keys(path: Path) -> list[AuthorizedKey]:
    """The keys in ``path`` (none if the file does not exist)."""
    try:
        with path.open("rb") as handle:
            writable_by_others = os.name == "posix" and os.fstat(handle.fileno()).st_mode & 0o022
            text = handle.read().decode("utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read {path}: {exc}") from exc
    if writable_by_others:  # anyone who can write it can let themselves in, as sshd knows
        raise KeyFileError(f"{path} can be changed by other users: run `chmod 644 {path}`")
    return parse_authorized_keys(text, str(path))


def add_authorized_key(path: Path, public_key: str, comment: str = "") -> bool:
    """Append ``public_key`` to ``path``; False if it was already there."""
    if not is_key(public_key):
        raise KeyFileError(f"not a CURVE public key: {public_key[:50]!r}")
    if any(entry.public_key == public_key for entry in read_authorized_keys(path)):
        return False
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    comment = " ".join(comment.split())[:200]  # one line, whatever the peer sent
    atomic_write_text(path, f"{text}{public_key} {comment}".rstrip() + "\n")
    return True


# --------------------------------------------------------------------------------------------
# Pairing


class PairingCode:
    """A one-time numeric code: valid for ``ttl_s`` seconds, single use, at most
    ``max_attempts`` tries from one source (an address) with ``min_interval_s`` between them,
    and ``max_total_attempts`` tries from all sources together.

    Counting per source keeps the window usable for the real coordinator: with one count for
    everyone, anyone on the LAN could use up the tries and block it. The total bounds guessing
    (30 tries at a 6-digit code: 3 in 100,000) and the sources tracked."""

    def __init__(
        self,
        *,
        ttl_s: float = 300.0,
        max_attempts: int = 5,
        max_total_attempts: int = 30,
        digits: int = 6,
        min_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.code = f"{secrets.randbelow(10**digits):0{digits}d}"
        self._clock = clock
        self.expires_at = clock() + ttl_s
        self._max_attempts = max_attempts
        self._total_left = max_total_attempts
        self._left: dict[str, int] = {}  # source -> tries left
        self._last: dict[str, float] = {}  # source -> time of its last try
        self._min_interval_s = min_interval_s
        self._used = False

    @property
    def active(self) -> bool:
        """Whether the code can still be used (by some source)."""
        return not self._used and self._total_left > 0 and self._clock() < self.expires_at

    def check(self, candidate: str, source: str = "") -> None:
        """Consume the code if ``candidate`` matches it; else raise :class:`PairingError`.
        ``source`` names who tries (the peer's address)."""
        now = self._clock()
        if self._used:
            raise PairingError(
                "this pairing code was already used; start the worker with "
                "--pair again for a new one"
            )
        if now >= self.expires_at:
            raise PairingError("the pairing code expired; start the worker with --pair again")
        left = min(self._left.get(source, self._max_attempts), self._total_left)
        if left <= 0:
            raise PairingError("too many wrong pairing codes; start the worker with --pair again")
        if now - self._last.get(source, -float("inf")) < self._min_interval_s:
            raise PairingError("pairing attempts too fast; wait a second and try again")
        self._last[source] = now
        self._left[source] = self._left.get(source, self._max_attempts) - 1
        self._total_left -= 1
        given = "".join(str(candidate).split()).replace("-", "").encode("utf-8")[:64]
        if not hmac.compare_digest(given, self.code.encode("ascii")):
            left = min(self._left[source], self._total_left)
            raise PairingError(f"wrong pairing code ({left} attempts left)")
        self._used = True


class Authorizer:
    """Who may talk to a worker: the ZAP policy and the per-message gate.

    ``is_allowed`` (ZAP, per connection) accepts authorized keys, and any key while a pairing
    code is active; ``is_authorized`` (per message) accepts only authorized keys, so an
    unpaired connection can do nothing but :meth:`pair`. Thread-safe. ``authorized_keys`` is
    re-read when the file changes.
    """

    def __init__(self, authorized_keys: Path | None = None, keys: Iterable[str] = ()) -> None:
        self.path = authorized_keys
        self._extra = set(keys)
        self._file_keys: frozenset[str] = frozenset()
        self._stamp: tuple[int, int] | None = None
        self._pairing: PairingCode | None = None
        self._ring_peers: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._reload()

    def _reload(self) -> None:
        if self.path is None:
            return
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp or stamp is None:
            entries = read_authorized_keys(self.path) if stamp else []
            self._file_keys, self._stamp = frozenset(e.public_key for e in entries), stamp

    @property
    def pairing_open(self) -> bool:
        """Whether a pairing code is active (unknown keys may connect, to pair only)."""
        return self._pairing is not None and self._pairing.active

    def open_pairing(self, **options: Any) -> PairingCode:
        """Start pairing with a new code (``PairingCode`` options); show ``.code`` to the user."""
        with self._lock:
            self._pairing = PairingCode(**options)
            return self._pairing

    def close_pairing(self) -> None:
        with self._lock:
            self._pairing = None

    def is_authorized(self, public_key: str) -> bool:
        """Whether ``public_key`` is a trusted coordinator (authorized_keys or paired)."""
        with self._lock:
            return public_key in self._extra or public_key in self._file_keys

    def set_ring_peers(self, public_keys: Iterable[str]) -> None:
        """The workers a trusted coordinator put before this one in its ring: they may connect
        and pass activations on (FORWARD only), for as long as that ring stands."""
        with self._lock:
            self._ring_peers = frozenset(public_keys)

    def is_ring_peer(self, public_key: str) -> bool:
        with self._lock:
            return public_key in self._ring_peers

    def is_allowed(self, public_key: str) -> bool:
        """The ZAP decision for a new connection from ``public_key``."""
        with self._lock:
            try:
                self._reload()
            except KeyFileError as exc:
                logger.error("%s; keeping the keys read before", exc)
            known = public_key in self._extra or public_key in self._file_keys
            known = known or public_key in self._ring_peers
        return known or self.pairing_open

    def pair(self, public_key: str, code: str, comment: str = "", source: str = "") -> None:
        """Trust ``public_key`` if ``code`` is the active pairing code; else raise. ``source``
        (the peer's address) has tries of its own (see :class:`PairingCode`)."""
        with self._lock:
            if self._pairing is None:
                raise PairingError("this worker is not pairing; start it with --pair")
            self._pairing.check(code, source)
            self._pairing = None
            self._extra.add(public_key)
        if self.path is not None:
            try:
                add_authorized_key(self.path, public_key, comment or "paired")
            except (KeyFileError, OSError) as exc:
                logger.error("paired for this run only, could not save the key: %s", exc)
        logger.warning("paired coordinator %s (%s)", fingerprint(public_key), comment)
