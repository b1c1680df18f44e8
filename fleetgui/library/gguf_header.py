"""A GGUF file's header (metadata and tensor table) read fast, without its arrays' items.

The gguf package's reader builds a numpy view of every item of every array, which takes
seconds for a 128k-token vocabulary; the library only needs each array's length. This reader
keeps scalars and strings, the item type and count of arrays, and every tensor's name, type,
shape and data offset; a tensor's bytes are mapped from the file only if asked for
(:attr:`HeaderTensor.data`, shaped as the gguf package shapes them, so the exporter's own
checks take it). Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fleetgui.export.gguf_source import GGUF_MAGIC, GGUFSourceError

DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
#: GGUF value type -> struct format of the fixed-size types.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # fmt: skip
#: Tensor types the gguf package maps to numpy items of their own (the rest as bytes).
_ITEM_TYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8,
               "I16": np.int16, "I32": np.int32, "I64": np.int64}  # fmt: skip


@dataclass(frozen=True)
class ArrayField:
    """An array value: what its items are and how many (the items are not read)."""

    item_type: int
    count: int


@dataclass
class HeaderTensor:
    """One tensor of the table; ``data`` maps its bytes from the file when first used."""

    path: Path
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]  # GGUF order: the fastest-varying dimension first
    data_offset: int  # from the start of the file
    n_elements: int
    n_bytes: int

    @cached_property
    def data(self) -> np.ndarray:
        from gguf.quants import quant_shape_to_byte_shape

        dims = tuple(reversed(self.shape))
        item = _ITEM_TYPES.get(self.tensor_type.name)
        if item is None:
            dims, item = quant_shape_to_byte_shape(dims, self.tensor_type), np.uint8
        return np.memmap(self.path, dtype=item, mode="r", offset=self.data_offset, shape=dims)


@dataclass
class GGUFHeader:
    path: Path
    version: int
    fields: dict[str, Any] = field(default_factory=dict)
    tensors: list[HeaderTensor] = field(default_factory=list)


class _Cursor:
    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer = buffer
        self.at = 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.buffer, self.at)
        self.at += struct.calcsize("<" + fmt)
        return value

    def string(self) -> str:
        length = self.take("Q")
        if self.at + length > len(self.buffer):
            raise ValueError(f"a string of {length} bytes runs past the end of the file")
        text = self.buffer[self.at : self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def skip_strings(self, count: int) -> None:
        for _ in range(count):
            self.at += 8 + struct.unpack_from("<Q", self.buffer, self.at)[0]

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_type, count = self.take("I"), self.take("Q")
            if item_type == _STRING:
                self.skip_strings(count)
            elif item_type in _SCALARS:
                self.at += count * struct.calcsize("<" + _SCALARS[item_type])
            else:
                raise ValueError(f"arrays of value type {item_type} are not supported")
            return ArrayField(item_type, count)
        raise ValueError(f"unknown value type {kind}")


def read_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file ``path``; ``GGUFSourceError`` when it is not one."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        with (
            path.open("rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf,
        ):
            if buf[:4] != GGUF_MAGIC:
                raise GGUFSourceError(f"{path} is not a GGUF file")
            cursor = _Cursor(buf)
            cursor.at = 4
            header = GGUFHeader(path, cursor.take("I"))
            if header.version < 2:
                raise GGUFSourceError(f"{path} is GGUF version {header.version}: too old")
            n_tensors, n_fields = cursor.take("Q"), cursor.take("Q")
            for _ in range(n_fields):
                key = cursor.string()
                header.fields[key] = cursor.value(cursor.take("I"))
            table = []
            for _ in range(n_tensors):
                name = cursor.string()
                shape = tuple(cursor.take("Q") for _ in range(cursor.take("I")))
                table.append(
                    (name, shape, GGMLQuantizationType(cursor.take("I")), cursor.take("Q"))
                )
            alignment = int(header.fields.get("general.alignment", DEFAULT_ALIGNMENT))
            start = -(-cursor.at // alignment) * alignment
    except (OSError, ValueError, struct.error) as exc:
        raise GGUFSourceError(f"{path} is not a readable GGUF file ({exc})") from exc
    for name, shape, kind, offset in table:
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        block, size = GGML_QUANT_SIZES[kind]
        header.tensors.append(
            HeaderTensor(path, name, kind, shape, start + offset, count, count * size // block)
        )
    return header
