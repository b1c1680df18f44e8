"""Who a worker trusts (``fleetgui.net.trust``): authorized_keys files, one-time pairing codes
and the ``Authorizer`` that decides with both."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clock_support import FakeClock

from fleetgui.net.keys import KeyFileError, KeyPair
from fleetgui.net.trust import (
    Authorizer,
    PairingCode,
    PairingError,
    add_authorized_key,
    parse_authorized_keys,
    read_authorized_keys,
)

pytestmark = pytest.mark.usefixtures("fleetgui_home")

POSIX = os.name == "posix"


def test_authorized_keys_parsing() -> None:
    a, b = KeyPair.generate().public, KeyPair.generate().public
    text = f"# trusted coordinators\n\n{a} laptop\n  {b}\n#{a} disabled\n"
    entries = parse_authorized_keys(text)
    assert [(e.public_key, e.comment) for e in entries] == [
        (a, "laptop"),
        (b, ""),
    ]


def test_authorized_keys_error_names_the_line() -> None:
    with pytest.raises(KeyFileError, match=r"keys.txt line 3: 'not-a-key'"):
        parse_authorized_keys(f"# x\n{KeyPair.generate().public}\nnot-a-key c\n", "keys.txt")


def test_add_authorized_key_dedupes(tmp_path: Path) -> None:
    path = tmp_path / "authorized_keys"
    path.write_text("# mine\n")
    key = KeyPair.generate().public
    assert add_authorized_key(path, key, "lab\nbox  one")
    assert not add_authorized_key(path, key, "again")
    assert [(e.public_key, e.comment) for e in read_authorized_keys(path)] == [(key, "lab box one")]
    assert path.read_text().startswith("# mine\n")
    with pytest.raises(KeyFileError):
        add_authorized_key(path, "nope")
    if POSIX:
        path.chmod(0o666)
        with pytest.raises(KeyFileError, match=r"changed by other users.*chmod 644"):
            read_authorized_keys(path)


def test_pairing_code_single_use() -> None:
    code = PairingCode(clock=FakeClock())
    assert len(code.code) == 6 and code.code.isdigit() and code.active
    code.check(f" {code.code[:3]} {code.code[3:]} ")  # spaces are ignored
    assert not code.active
    with pytest.raises(PairingError, match="already used"):
        code.check(code.code)


def test_pairing_code_attempt_limit_and_rate() -> None:
    clock = FakeClock()
    code = PairingCode(clock=clock, max_attempts=3, max_total_attempts=3, min_interval_s=1.0)
    wrong = "x" + code.code[1:]
    with pytest.raises(PairingError, match="2 attempts left"):
        code.check(wrong)
    with pytest.raises(PairingError, match="too fast"):
        code.check(code.code)  # refused without using up an attempt
    for left in (1, 0):
        clock.now += 1
        with pytest.raises(PairingError, match=f"{left} attempts left"):
            code.check(wrong)
    clock.now += 1
    assert not code.active
    with pytest.raises(PairingError, match="too many wrong"):
        code.check(code.code)


def test_a_stranger_using_up_its_pairing_tries_leaves_the_coordinator_its_own() -> None:
    """One count for everyone let anyone on the LAN spend the 5 tries and block the real
    coordinator; tries count per source, and the total still bounds guessing."""
    clock = FakeClock()
    code = PairingCode(clock=clock, max_attempts=3, max_total_attempts=7, min_interval_s=1.0)
    wrong = "x" + code.code[1:]
    for _ in range(3):
        with pytest.raises(PairingError, match="wrong pairing code"):
            code.check(wrong, "10.0.0.66")
        clock.now += 1
    with pytest.raises(PairingError, match="too many wrong"):
        code.check(code.code, "10.0.0.66")  # even the right code: that source is done
    with pytest.raises(PairingError, match="wrong pairing code"):
        code.check(wrong, "10.0.0.67")  # another source's fast try is its own, not too fast
    assert code.active
    code.check(code.code, "10.0.0.5")  # the coordinator pairs
    assert not code.active
    many = PairingCode(clock=clock, max_attempts=3, max_total_attempts=4, min_interval_s=0.0)
    for source in ("a", "b", "c"):
        with pytest.raises(PairingError):
            many.check(wrong, source)
    with pytest.raises(PairingError, match="0 attempts left"):
        many.check(wrong, "d")
    assert not many.active  # the total is spent: nobody can guess on


def test_pairing_code_expires() -> None:
    clock = FakeClock()
    code = PairingCode(clock=clock, ttl_s=60)
    clock.now += 60
    assert not code.active
    with pytest.raises(PairingError, match="expired"):
        code.check(code.code)


def test_authorizer_policy(tmp_path: Path) -> None:
    path = tmp_path / "authorized_keys"
    known, stranger = KeyPair.generate().public, KeyPair.generate().public
    path.write_text(f"{known} ok\n")
    auth = Authorizer(path)
    assert auth.is_allowed(known) and auth.is_authorized(known)
    assert not auth.is_allowed(stranger) and not auth.pairing_open
    with pytest.raises(PairingError, match="not pairing"):
        auth.pair(stranger, "123456")
    code = auth.open_pairing(min_interval_s=0)
    assert auth.pairing_open and auth.is_allowed(stranger) and not auth.is_authorized(stranger)
    auth.pair(stranger, code.code, "desk")
    assert auth.is_authorized(stranger) and not auth.pairing_open
    assert (stranger, "desk") in [(e.public_key, e.comment) for e in read_authorized_keys(path)]
    late = KeyPair.generate().public
    assert not auth.is_allowed(late)
    add_authorized_key(path, late, "added by hand while running")
    assert auth.is_allowed(late)  # the file is re-read when it changes
