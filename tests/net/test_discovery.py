"""Finding workers by mDNS (``fleetgui.net.discovery``): DNS-SD TXT records that round-trip and
fit DNS's limits, and zeroconf advertising and browsing on this machine."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest
from net_support import make_info, protocol_port, run

from fleetgui.net import discovery
from fleetgui.net.discovery import (
    DiscoveryEvent,
    ZeroconfAdvertiser,
    ZeroconfBrowser,
    decode_txt,
    encode_txt,
)
from fleetgui.net.worker_info import WorkerInfo, WorkerInfoError


def test_txt_round_trip() -> None:
    info = make_info(busy=True)
    record = encode_txt(info)
    assert decode_txt(record, "192.168.1.20", 5555) == replace(info, host="192.168.1.20")
    as_bytes = {k.encode(): v.encode() for k, v in record.items()}  # what zeroconf hands back
    assert decode_txt(as_bytes, "192.168.1.20", 5555) == replace(info, host="192.168.1.20")


def test_txt_strings_fit_dns_limits_and_cut_whole_characters() -> None:
    long = make_info(
        name="Küchen-PC " * 40,
        os="Ö" * 300,
        cpu="x" * 400,
        devices=tuple(f"GPU.{i}" for i in range(16)),
    )
    record = encode_txt(long)
    for key, value in record.items():
        assert len(key.encode()) + 1 + len(value.encode()) <= 255, key
    back = decode_txt(record, "10.0.0.2", 5555)
    assert long.name.startswith(back.name) and len(back.name) > 100
    assert set(back.os) == {"Ö"}  # never half a character
    assert len(discovery.instance_name(long).encode()) <= 63


def test_a_record_without_a_key_is_rejected() -> None:
    record = encode_txt(make_info())
    del record["key"]
    with pytest.raises(WorkerInfoError, match="public_key"):
        decode_txt(record, "10.0.0.2", 5555)


def test_advertise_and_browse_over_multicast_on_loopback() -> None:
    """Real python-zeroconf on 127.0.0.1: one advertiser, one browser, add/update/remove."""
    name = f"test-{uuid.uuid4().hex[:8]}"  # other runs on this machine may advertise too
    events: asyncio.Queue[tuple[DiscoveryEvent, WorkerInfo]] = asyncio.Queue()

    def on_change(event: DiscoveryEvent, info: WorkerInfo) -> None:
        if info.name == name:
            events.put_nowait((event, info))

    async def body() -> None:
        info = make_info(name=name, host="127.0.0.1", port=protocol_port())
        browser = ZeroconfBrowser(on_change, interfaces=["127.0.0.1"])
        advertiser = ZeroconfAdvertiser(interfaces=["127.0.0.1"])
        async with browser:
            await advertiser.start(info)
            try:
                event, seen = await asyncio.wait_for(events.get(), 10)
                assert event is DiscoveryEvent.ADDED
                assert seen == info
                assert browser.workers[info.address] == info
                await advertiser.update(replace(info, busy=True, free_ram_bytes=1))
                event, seen = await asyncio.wait_for(events.get(), 10)
                assert event is DiscoveryEvent.UPDATED
                assert seen.busy and seen.free_ram_bytes == 1
            finally:
                await advertiser.stop()  # sends goodbye packets
            event, seen = await asyncio.wait_for(events.get(), 10)
            assert event is DiscoveryEvent.REMOVED and seen.name == name
            assert info.address not in browser.workers

    run(body, timeout_s=40)
