"""Which cache blocks hold each stream's KV on a paged stage: block tables over one shared pool.

A paged stage (:mod:`fleetgui.runtime.paged_stage`) keeps every stream's keys and values in
fixed-size blocks of one pool, as OpenVINO's PagedAttention reads them: a stream is a list of
block numbers (its table) and a length. Streams of any lengths then share one pass, a rewind is
a shorter length, and a copied prefix (:meth:`KvBlocks.fork`) shares the source's blocks until
either side writes into one, which then gets its own copy first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class KvBlocksError(ValueError):
    """A stream operation the tables cannot do (the message says which and why)."""


@dataclass
class _Table:
    blocks: list[int] = field(default_factory=list)
    length: int = 0  # tokens held, in order, from the table's first block


class KvBlocks:
    """Block tables of a pool of ``capacity`` blocks of ``block_size`` tokens.

    ``grow(capacity)`` is called before a block beyond the pool is handed out, with the new
    number of blocks (double, or enough): the owner enlarges its cache tensors, keeping their
    contents."""

    def __init__(self, block_size: int, grow: Callable[[int], None], capacity: int = 0) -> None:
        if block_size < 1:
            raise ValueError("a block holds at least one token")
        self.block_size = block_size
        self._grow = grow
        self.capacity = capacity
        self._free: list[int] = list(range(capacity - 1, -1, -1))
        self._refs = [0] * capacity
        self._tables: dict[int, _Table] = {}

    # -- reading ------------------------------------------------------------------------------

    def streams(self) -> list[int]:
        return list(self._tables)

    def holds(self, stream_id: int) -> bool:
        """Whether the stream has a table (it may hold no tokens)."""
        return stream_id in self._tables

    def length(self, stream_id: int) -> int:
        """Tokens the stream holds (0 for a stream never seen)."""
        table = self._tables.get(stream_id)
        return table.length if table is not None else 0

    def table(self, stream_id: int) -> list[int]:
        """The stream's blocks, in order (a copy)."""
        table = self._tables.get(stream_id)
        return list(table.blocks) if table is not None else []

    @property
    def blocks_in_use(self) -> int:
        """Blocks some stream holds (a shared block counts once)."""
        return self.capacity - len(self._free)

    # -- changing -----------------------------------------------------------------------------

    def truncate(self, stream_id: int, length: int) -> None:
        """Keep the stream's first ``length`` tokens (at most what it holds)."""
        table = self._tables.setdefault(stream_id, _Table())
        if not 0 <= length <= table.length:
            raise KvBlocksError(
                f"stream {stream_id} holds {table.length} tokens, cannot keep {length}"
            )
        table.length = length
        self._drop(table.blocks[self._blocks_for(length) :])
        del table.blocks[self._blocks_for(length) :]

    def reserve(self, stream_id: int, n_tokens: int) -> list[tuple[int, int]]:
        """Make room for the stream's next ``n_tokens`` (written at its length onwards): its
        own blocks for every position they touch. Returns the copies to make first, (source
        block, new block), for shared blocks about to be written. The length is unchanged
        until :meth:`advance`."""
        table = self._tables.setdefault(stream_id, _Table())
        copies: list[tuple[int, int]] = []
        first = table.length // self.block_size
        for index in range(
            first, min(len(table.blocks), self._blocks_for(table.length + n_tokens))
        ):
            block = table.blocks[index]
            if self._refs[block] > 1:
                own = self._take()
                copies.append((block, own))
                self._refs[block] -= 1
                table.blocks[index] = own
        while len(table.blocks) < self._blocks_for(table.length + n_tokens):
            table.blocks.append(self._take())
        return copies

    def advance(self, stream_id: int, n_tokens: int) -> None:
        """Count ``n_tokens`` written after a pass (room made by :meth:`reserve`)."""
        table = self._tables[stream_id]
        if self._blocks_for(table.length + n_tokens) > len(table.blocks):
            raise KvBlocksError(f"stream {stream_id} has no room reserved for {n_tokens} tokens")
        table.length += n_tokens

    def fork(self, source: int, stream_id: int, keep: int) -> None:
        """Start ``stream_id`` (dropping what it held) with the first ``keep`` tokens of
        ``source``, sharing its blocks."""
        origin = self._tables.get(source)
        held = origin.length if origin is not None else 0
        if origin is None or source == stream_id or not 0 < keep <= held:
            raise KvBlocksError(
                f"cannot start stream {stream_id} from {keep} tokens of stream {source}, "
                f"which holds {held}"
            )
        self.release(stream_id)
        blocks = origin.blocks[: self._blocks_for(keep)]
        for block in blocks:
            self._refs[block] += 1
        self._tables[stream_id] = _Table(list(blocks), keep)

    def release(self, stream_id: int) -> None:
        """Forget the stream; blocks nobody else holds return to the pool."""
        table = self._tables.pop(stream_id, None)
        if table is not None:
            self._drop(table.blocks)

    # -- the pool -----------------------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _take(self) -> int:
        if not self._free:
            wanted = max(2 * self.capacity, 16)
            self._grow(wanted)
            self._free = list(range(wanted - 1, self.capacity - 1, -1))
            self._refs += [0] * (wanted - self.capacity)
            self.capacity = wanted
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def _drop(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free.append(block)
