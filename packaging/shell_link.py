"""Read a Windows shortcut (``.lnk``, the Shell Link format [MS-SHLLINK]): what it starts.

Only what the installer check needs: the target path, its arguments and working folder.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

_HEADER_SIZE = 0x4C
_HAS_ID_LIST, _HAS_LINK_INFO, _HAS_NAME, _HAS_RELATIVE_PATH = 0x1, 0x2, 0x4, 0x8
_HAS_WORKING_DIR, _HAS_ARGUMENTS, _HAS_ICON, _IS_UNICODE = 0x10, 0x20, 0x40, 0x80
_VOLUME_ID_AND_LOCAL_BASE_PATH = 0x1


@dataclass(frozen=True)
class ShellLink:
    """What a shortcut starts (paths as written in it)."""

    target: str
    arguments: str = ""
    working_dir: str = ""

    def same_as(self, other: ShellLink) -> bool:
        """Equal as Windows compares paths (case-insensitively)."""
        return (
            self.target.casefold() == other.target.casefold()
            and self.arguments == other.arguments
            and self.working_dir.casefold() == other.working_dir.casefold()
        )


def _c_string(data: bytes, offset: int) -> str:
    return data[offset : data.index(b"\0", offset)].decode("cp1252")


def read_shell_link(path: Path) -> ShellLink:
    """The target, arguments and working folder of the shortcut at ``path``."""
    data = path.read_bytes()
    if len(data) < _HEADER_SIZE or struct.unpack_from("<I", data, 0)[0] != _HEADER_SIZE:
        raise ValueError(f"{path} is not a Windows shortcut (.lnk)")
    (flags,) = struct.unpack_from("<I", data, 0x14)
    offset = _HEADER_SIZE
    if flags & _HAS_ID_LIST:
        offset += 2 + struct.unpack_from("<H", data, offset)[0]
    target = ""
    if flags & _HAS_LINK_INFO:
        size, _, info_flags, _, base_offset, _, suffix_offset = struct.unpack_from(
            "<7I", data, offset
        )
        if info_flags & _VOLUME_ID_AND_LOCAL_BASE_PATH:
            target = _c_string(data, offset + base_offset) + _c_string(data, offset + suffix_offset)
        offset += size
    strings: dict[int, str] = {}
    for flag in (_HAS_NAME, _HAS_RELATIVE_PATH, _HAS_WORKING_DIR, _HAS_ARGUMENTS, _HAS_ICON):
        if flags & flag:
            (count,) = struct.unpack_from("<H", data, offset)
            offset += 2
            if flags & _IS_UNICODE:
                strings[flag] = data[offset : offset + 2 * count].decode("utf-16-le")
                offset += 2 * count
            else:
                strings[flag] = data[offset : offset + count].decode("cp1252")
                offset += count
    # Wine counts each string's terminating NUL in (Windows does not): drop it.
    arguments, working_dir = (
        strings.get(f, "").rstrip("\0") for f in (_HAS_ARGUMENTS, _HAS_WORKING_DIR)
    )
    return ShellLink(target, arguments, working_dir)
