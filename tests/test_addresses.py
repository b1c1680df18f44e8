"""Network addresses as text (``fleetgui.addresses``): formatted, parsed back, refused with what
is expected. (The worker keys pinned by address: ``tests/fleet/pairing/test_known_workers.py``.)"""

from __future__ import annotations

import pytest

from fleetgui.addresses import format_address, parse_address, parse_zmq_endpoint, zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.net.worker_info import WorkerInfo

CASES = [  # (host, port, host:port, tcp endpoint)
    ("192.168.1.20", 5555, "192.168.1.20:5555", "tcp://192.168.1.20:5555"),
    ("pc-kitchen.local", 6000, "pc-kitchen.local:6000", "tcp://pc-kitchen.local:6000"),
    ("localhost", 1, "localhost:1", "tcp://localhost:1"),
    ("fe80::1", 5555, "[fe80::1]:5555", "tcp://[fe80::1]:5555"),
    ("::1", 65534, "[::1]:65534", "tcp://[::1]:65534"),
    ("fe80::1%eth0", 5555, "[fe80::1%eth0]:5555", "tcp://[fe80::1%eth0]:5555"),
]


@pytest.mark.parametrize(("host", "port", "address", "endpoint"), CASES)
def test_format_and_endpoint(host: str, port: int, address: str, endpoint: str) -> None:
    assert format_address(host, port) == address
    assert zmq_endpoint(host, port) == endpoint
    assert parse_zmq_endpoint(endpoint) == (host, port)


@pytest.mark.parametrize(
    "text", ["tcp://fe80::1:5555", "tcp://host", "tcp://a/b:5", "tcp://h:0", "tcp://h:70000", "h:5"]
)
def test_a_zmq_endpoint_that_is_not_tcp_host_port_is_refused(text: str) -> None:
    with pytest.raises(FleetguiError, match="is not tcp://host:port"):
        parse_zmq_endpoint(text)


@pytest.mark.parametrize(("host", "port", "address", "endpoint"), CASES)
def test_parse_reads_back_what_format_writes(
    host: str, port: int, address: str, endpoint: str
) -> None:
    assert parse_address(address) == (host, port)
    assert parse_address(f"  {address}\t") == (host, port)  # as typed into a field


@pytest.mark.parametrize(
    "text",
    [
        "",
        "pc",
        "pc:",
        ":5555",
        "pc:0",
        "pc:65535",  # the info probe would need port + 1
        "pc:70000",
        "pc:123456",
        "pc:port",
        "pc:-1",
        "fe80::1:5555",  # IPv6 without brackets: which colon is the port's?
        "[fe80::1]",
        "[fe80::1]5555",
        "pc name:5555",
        "tcp://pc:5555",
    ],
)
def test_parse_rejects_saying_what_is_expected(text: str) -> None:
    with pytest.raises(FleetguiError) as raised:
        parse_address(text)
    assert str(raised.value) == (
        f"{text!r} is not HOST:PORT (a worker address, e.g. 192.168.1.20:5555)"
    )


def test_worker_info_address_brackets_ipv6_only() -> None:
    v4 = WorkerInfo("a", "10.0.0.2", 5555, "k", "1", 1)
    v6 = WorkerInfo("b", "fe80::2", 5555, "k", "1", 1)
    assert (v4.address, v6.address) == ("10.0.0.2:5555", "[fe80::2]:5555")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("192.168.1.20:5555", ("192.168.1.20", 5555)),
        (" pc-kitchen.local:6000 ", ("pc-kitchen.local", 6000)),
        ("[fe80::1]:5555", ("fe80::1", 5555)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["pc", "pc:", ":5555", "pc:0", "pc:70000", "fe80::1:5555"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(FleetguiError, match="HOST:PORT"):
        parse_address(text)
