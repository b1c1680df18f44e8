"""Block tables: room made on demand, shared prefixes copied only where written, blocks back
in the pool when nobody holds them."""

from __future__ import annotations

import pytest

from fleetgui.runtime.kv_blocks import KvBlocks, KvBlocksError


def test_blocks_are_reserved_as_streams_grow_and_the_pool_grows_with_them() -> None:
    grown: list[int] = []
    blocks = KvBlocks(4, grown.append)
    assert blocks.reserve(1, 10) == []
    blocks.advance(1, 10)
    assert (blocks.length(1), len(blocks.table(1)), grown) == (10, 3, [16])
    for stream in range(2, 8):
        blocks.reserve(stream, 9)
    assert grown == [16, 32]  # 3 + 6 x 3 = 21 blocks
    with pytest.raises(KvBlocksError, match="no room reserved"):
        blocks.advance(1, 3)


def test_a_copied_prefix_shares_blocks_until_written() -> None:
    blocks = KvBlocks(4, lambda capacity: None)
    blocks.reserve(1, 10)
    blocks.advance(1, 10)
    blocks.fork(1, 2, 6)  # blocks 0 and 1 shared; stream 2 writes at 6, inside block 1
    assert blocks.table(2) == blocks.table(1)[:2]
    assert blocks.blocks_in_use == 3
    copies = blocks.reserve(2, 3)
    assert copies == [(blocks.table(1)[1], blocks.table(2)[1])]
    assert blocks.table(2)[0] == blocks.table(1)[0] and blocks.blocks_in_use == 5
    blocks.release(1)
    assert blocks.blocks_in_use == 3  # stream 2's three blocks, one of them once shared
    assert blocks.reserve(2, 1) == []  # nobody else holds its blocks now


def test_truncation_frees_whole_blocks_and_checks_lengths() -> None:
    blocks = KvBlocks(4, lambda capacity: None)
    blocks.reserve(1, 9)
    blocks.advance(1, 9)
    blocks.truncate(1, 4)
    assert (blocks.length(1), len(blocks.table(1)), blocks.blocks_in_use) == (4, 1, 1)
    with pytest.raises(KvBlocksError, match="holds 4 tokens, cannot keep 5"):
        blocks.truncate(1, 5)
    with pytest.raises(KvBlocksError, match="cannot start stream 1 from 2 tokens of stream 1"):
        blocks.fork(1, 1, 2)
