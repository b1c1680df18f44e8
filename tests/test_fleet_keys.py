"""Fleet keys and secure sockets: identities, authorized_keys, pairing, pinning, and real CURVE
sockets on loopback (authorized, refused, pairing, bad input)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetgui.cli import main
from fleetgui.fleet.pairing.known_workers import KnownWorkers, WorkerKeyChangedError
from fleetgui.net.forward_codec import encode_forward, request_from_message
from fleetgui.net.keys import (
    KEYRING_SERVICE,
    KEYRING_USER,
    KeyFileError,
    KeyPair,
    coordinator_identity,
    is_key,
    load_identity,
    worker_identity,
    write_identity,
)
from fleetgui.net.protocol import PROTOCOL_VERSION, Message, Op, RemoteError, encode
from fleetgui.net.secure_socket import (
    ConnectError,
    SecureClient,
    SecureServer,
    WorkerRefusedKeyError,
)
from fleetgui.net.trust import (
    Authorizer,
    PairingCode,
    PairingError,
    add_authorized_key,
    parse_authorized_keys,
    read_authorized_keys,
)
from fleetgui.runtime.stage import ForwardRequest

POSIX = os.name == "posix"


@pytest.fixture(autouse=True)
def fleet_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "config"


@pytest.fixture
def set_keyring() -> Iterator[Callable[[str], Any]]:
    """``set_keyring("fake")`` installs an ``InMemoryKeyring`` (a fake: CI has no OS
    keyring) and returns it; ``set_keyring("none")`` installs keyring's "no keyring" backend. The
    previous backend is restored afterwards. keyring is an app dependency: skip without it."""
    keyring = pytest.importorskip("keyring")
    from keyring.backends import fail
    from keyring_support import InMemoryKeyring

    def install(kind: str) -> Any:
        backend = InMemoryKeyring() if kind == "fake" else fail.Keyring()
        keyring.set_keyring(backend)
        return backend

    previous = keyring.get_keyring()
    yield install
    keyring.set_keyring(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------------------------------
# Identities


def test_key_pair_and_key_check() -> None:
    pair = KeyPair.generate()
    assert KeyPair.from_secret(pair.secret) == pair
    assert is_key(pair.public) and is_key(pair.secret)
    assert pair.secret not in repr(pair)
    for bad in ("", "~" * 40, "#" * 40, pair.public[:-1], pair.public + "A", "é" * 40):
        assert not is_key(bad)


def test_identity_dir_round_trip_and_no_silent_overwrite(tmp_path: Path) -> None:
    pair = KeyPair.generate()
    secret_path, public_path = write_identity(tmp_path / "id", pair)
    assert load_identity(tmp_path / "id") == pair
    assert public_path.read_text().split()[0] == pair.public
    if POSIX:
        assert mode(secret_path) == 0o600
    with pytest.raises(KeyFileError, match="--force"):
        write_identity(tmp_path / "id", KeyPair.generate())
    other = KeyPair.generate()
    write_identity(tmp_path / "id", other, force=True)
    assert load_identity(tmp_path / "id") == other


def test_missing_identity_says_how_to_create_it(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="fleetgui keys --out"):
        load_identity(tmp_path / "nothing")


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_secret_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    write_identity(tmp_path, KeyPair.generate())
    (tmp_path / "coordinator.key").chmod(0o644)
    with pytest.raises(KeyFileError, match=r"other users \(mode 644\).*chmod 600"):
        load_identity(tmp_path)


def test_worker_identity_is_created_private_and_kept(fleet_home: Path) -> None:
    first = worker_identity()
    assert worker_identity() == first
    if POSIX:
        assert mode(fleet_home / "worker.key") == 0o600


def test_coordinator_secret_in_keyring(set_keyring: Any, fleet_home: Path) -> None:
    fake = set_keyring("fake")
    pair = coordinator_identity()
    assert fake.store[(KEYRING_SERVICE, KEYRING_USER)] == pair.secret
    assert not (fleet_home / "coordinator.key").exists()
    assert (fleet_home / "coordinator.pub").read_text().split()[0] == pair.public
    assert coordinator_identity() == pair


def test_coordinator_secret_falls_back_to_private_file(
    set_keyring: Any, fleet_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    set_keyring("none")
    with caplog.at_level(logging.WARNING, logger="fleetgui.net.keys"):
        pair = coordinator_identity()
    assert "no usable OS keyring" in caplog.text
    if POSIX:
        assert mode(fleet_home / "coordinator.key") == 0o600
    assert coordinator_identity() == pair
    assert (fleet_home / "coordinator.pub").read_text().split()[0] == pair.public


def test_coordinator_secret_without_keyring_package(
    monkeypatch: pytest.MonkeyPatch, fleet_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)  # a worker-only install has no keyring
    with caplog.at_level(logging.WARNING, logger="fleetgui.net.keys"):
        pair = coordinator_identity()
    assert "keyring package is not installed" in caplog.text
    assert (fleet_home / "coordinator.key").exists()
    assert coordinator_identity() == pair


def test_keys_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "--out", str(tmp_path / "id")]) == 0
    out = capsys.readouterr().out
    pair = load_identity(tmp_path / "id")
    assert out.splitlines()[0] == pair.public and "coordinator.key" in out
    assert main(["keys", "--out", str(tmp_path / "id")]) == 1
    assert "--force" in capsys.readouterr().err
    assert load_identity(tmp_path / "id") == pair
    assert main(["keys", "--out", str(tmp_path / "id"), "--force"]) == 0
    assert load_identity(tmp_path / "id") != pair


# --------------------------------------------------------------------------------------------
# authorized_keys


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


# --------------------------------------------------------------------------------------------
# Pairing codes and the Authorizer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pairing_code_single_use() -> None:
    code = PairingCode(clock=Clock())
    assert len(code.code) == 6 and code.code.isdigit() and code.active
    code.check(f" {code.code[:3]} {code.code[3:]} ")  # spaces are ignored
    assert not code.active
    with pytest.raises(PairingError, match="already used"):
        code.check(code.code)


def test_pairing_code_attempt_limit_and_rate() -> None:
    clock = Clock()
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
    clock = Clock()
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
    clock = Clock()
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


# --------------------------------------------------------------------------------------------
# Known workers


def test_known_workers_trust_on_first_use(fleet_home: Path) -> None:
    known = KnownWorkers()
    key, other = KeyPair.generate().public, KeyPair.generate().public
    assert known.check("10.0.0.2:5555", "pc-2", key)
    assert not known.check("10.0.0.2:5555", "pc-2", key)
    assert known.check("10.0.0.3:5555", "pc-2", other)  # another address is another entry
    with pytest.raises(WorkerKeyChangedError) as info:
        KnownWorkers().check("10.0.0.2:5555", "pc-2", other)
    assert "'pc-2@10.0.0.2:5555'" in str(info.value)
    assert str(fleet_home / "known_workers.json") in str(info.value)
    assert known.forget("10.0.0.2:5555", "pc-2")
    assert known.check("10.0.0.2:5555", "pc-2", other)
    (fleet_home / "known_workers.json").write_text("{broken")
    with pytest.raises(KeyFileError, match="delete it"):
        known.pinned("10.0.0.2:5555", "pc-2")


# --------------------------------------------------------------------------------------------
# Secure sockets on loopback

ENDPOINT = "tcp://127.0.0.1:*"


async def serve(server: SecureServer) -> None:
    """A minimal worker: HELLO -> HELLO_OK, FORWARD -> the request echoed back."""
    while True:
        incoming = await server.recv()
        message = incoming.message
        if message.op is Op.FORWARD:
            request = request_from_message(message)
            frames = encode_forward(request, request_id=message.request_id)
        else:
            frames = encode(Message(Op.HELLO_OK, request_id=message.request_id))
        await server.send(incoming.peer, frames)


def run_with_server(
    authorizer: Authorizer,
    body: Callable[[str, KeyPair], Awaitable[None]],
) -> None:
    """Start a worker server on a free loopback port, run ``body(endpoint, worker_pair)``."""

    async def main() -> None:
        worker = KeyPair.generate()
        server = SecureServer(worker, authorizer, name="w1")
        endpoint = await server.bind(ENDPOINT)
        task = asyncio.create_task(serve(server))
        try:
            await body(endpoint, worker)
        finally:
            task.cancel()
            server.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def client_for(worker: KeyPair, me: KeyPair | None = None, timeout_s: float = 3) -> SecureClient:
    return SecureClient(me or KeyPair.generate(), worker.public, name="w1", timeout_s=timeout_s)


def test_authorized_client_round_trips() -> None:
    me = KeyPair.generate()

    async def body(endpoint: str, worker: KeyPair) -> None:
        client = client_for(worker, me)
        try:
            await client.connect(endpoint)
            assert (await client.request(Message(Op.HELLO))).op is Op.HELLO_OK
            # one frame, and a prompt's activations in full 1 MiB frames: the encrypted frame
            # on the wire is larger than 1 MiB, and the sockets' cap must allow for that
            for shape in ((1, 1, 4096), (1, 256, 4096 + 3)):
                payload = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                await client.send(encode_forward(ForwardRequest(7, payload, rewind=2)))
                echoed = request_from_message(await client.recv())
                np.testing.assert_array_equal(echoed.payload, payload)
                assert (echoed.stream_id, echoed.rewind) == (7, 2)
        finally:
            client.close()

    run_with_server(Authorizer(keys=[me.public]), body)


def test_unpaired_client_gets_a_clear_refusal(caplog: pytest.LogCaptureFixture) -> None:
    async def body(endpoint: str, worker: KeyPair) -> None:
        client = client_for(worker)
        try:
            with pytest.raises(WorkerRefusedKeyError, match=r"refused this coordinator's key"):
                await client.connect(endpoint)
        finally:
            client.close()

    with caplog.at_level(logging.WARNING, logger="fleetgui.net.secure_socket"):
        run_with_server(Authorizer(keys=[KeyPair.generate().public]), body)
    assert "w1 refused a connection from 127.0.0.1" in caplog.text


def test_wrong_worker_key_and_unreachable_worker() -> None:
    me = KeyPair.generate()

    async def body(endpoint: str, worker: KeyPair) -> None:
        impostor = client_for(KeyPair.generate(), me)  # expects another worker key
        closed = client_for(worker, me, timeout_s=0.3)
        try:
            with pytest.raises(ConnectError, match="does not hold the expected key"):
                await impostor.connect(endpoint)
            with pytest.raises(ConnectError, match=r"is unreachable after 0\.3 s"):
                await closed.connect("tcp://127.0.0.1:1")
        finally:
            impostor.close()
            closed.close()

    run_with_server(Authorizer(keys=[me.public]), body)


def test_pairing_flow(tmp_path: Path) -> None:
    authorizer = Authorizer(tmp_path / "authorized_keys")
    code = authorizer.open_pairing(min_interval_s=0)
    me = KeyPair.generate()

    async def body(endpoint: str, worker: KeyPair) -> None:
        client, late = client_for(worker, me), client_for(worker)
        try:
            await client.connect(endpoint)  # allowed in: a pairing code is active
            with pytest.raises(RemoteError, match="not authorized on worker 'w1'"):
                await client.request(Message(Op.HELLO))
            with pytest.raises(PairingError, match="wrong pairing code"):
                await client.pair("000000" if code.code != "000000" else "111111")
            await client.pair(code.code, "test coordinator")
            assert (await client.request(Message(Op.HELLO))).op is Op.HELLO_OK
            with pytest.raises(WorkerRefusedKeyError):  # the code is used up: pairing closed
                await late.connect(endpoint)
        finally:
            client.close()
            late.close()

    run_with_server(authorizer, body)
    assert [e.public_key for e in read_authorized_keys(tmp_path / "authorized_keys")] == [me.public]


def test_expired_pairing_code_is_refused() -> None:
    clock = Clock()
    authorizer = Authorizer()
    code = authorizer.open_pairing(clock=clock, ttl_s=60)

    async def body(endpoint: str, worker: KeyPair) -> None:
        early, late = client_for(worker), client_for(worker)
        try:
            await early.connect(endpoint)
            clock.now += 61
            with pytest.raises(PairingError, match="expired"):
                await early.pair(code.code)
            with pytest.raises(WorkerRefusedKeyError):
                await late.connect(endpoint)
        finally:
            early.close()
            late.close()

    run_with_server(authorizer, body)


def test_bad_messages_get_an_error_reply_and_the_server_survives() -> None:
    me = KeyPair.generate()

    async def body(endpoint: str, worker: KeyPair) -> None:
        client = client_for(worker, me)
        try:
            await client.connect(endpoint)
            await client.send([b"GET / HTTP/1.0\r\n"])
            reply = await client.recv()
            assert reply.op is Op.ERROR and reply.meta["code"] == "bad_magic"
            other_version = bytearray(encode(Message(Op.HELLO))[0])
            other_version[4:6] = (PROTOCOL_VERSION + 1).to_bytes(2, "little")
            await client.send([bytes(other_version)])
            reply = await client.recv()
            assert reply.meta["code"] == "bad_version"
            assert f"protocol version {PROTOCOL_VERSION + 1}" in reply.meta["message"]
            assert (await client.request(Message(Op.HELLO))).op is Op.HELLO_OK
        finally:
            client.close()

    run_with_server(Authorizer(keys=[me.public]), body)


def test_known_workers_file_is_json(fleet_home: Path) -> None:
    KnownWorkers().check("h:1", "n", KeyPair.generate().public)
    data = json.loads((fleet_home / "known_workers.json").read_text())
    assert data["version"] == 1 and "n@h:1" in data["workers"]


def test_worker_side_imports_stay_lean() -> None:
    """The worker imports these modules; they must not pull in Qt, torch or keyring."""
    code = (
        "import sys, fleetgui.net.secure_socket, fleetgui.net.protocol, fleetgui.net.keys;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'PySide6', 'keyring', 'openvino', 'transformers'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
