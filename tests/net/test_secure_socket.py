"""Encrypted sockets (``fleetgui.net.secure_socket``), real CURVE on loopback: an authorized
client round-trips, an unpaired one is refused clearly, a wrong worker key or an unreachable
worker is named, pairing over the socket, bad messages answered; and the worker's side stays
lean."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
from clock_support import FakeClock

from fleetgui.net.forward_codec import encode_forward, request_from_message
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import PROTOCOL_VERSION, Message, Op, RemoteError, encode
from fleetgui.net.secure_socket import (
    ConnectError,
    SecureClient,
    SecureServer,
    WorkerRefusedKeyError,
)
from fleetgui.net.trust import Authorizer, PairingError, read_authorized_keys
from fleetgui.runtime.stage import ForwardRequest

pytestmark = pytest.mark.usefixtures("fleetgui_home")


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
    clock = FakeClock()
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
