"""Draw the fleetgui app icon and write ``resources/icons/fleetgui.ico`` and ``fleetgui.png``.

The picture is ``resources/fleetgui.svg`` (a blue rounded square holding four PCs linked in a
ring), redrawn here from the same shapes in pure Python: rounded rectangles rasterised with 4x4
supersampling, so the output is byte-for-byte the same on every machine and needs neither Qt nor
Pillow. The ``.ico`` holds 16 to 256 px images (32-bit BMP entries below 256 px, a PNG entry at
256 px, as Windows Vista and later expect); the ``.png`` is the 256 px image.

Run ``python packaging/make_icon.py`` after changing the shapes; ``--check`` exits with status 1
when the committed files differ from what this script draws (the packaging test runs it).
"""

from __future__ import annotations

import argparse
import logging
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
ICO_PATH = ROOT / "resources" / "icons" / "fleetgui.ico"
PNG_PATH = ROOT / "resources" / "icons" / "fleetgui.png"
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
VIEWBOX = 64.0
SUPERSAMPLE = 4

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class RoundRect:
    """A filled rectangle in the 64x64 view box, corners rounded with radius ``r``."""

    x: float
    y: float
    w: float
    h: float
    r: float
    color: RGB

    def covers(self, px: float, py: float) -> bool:
        if not (self.x <= px < self.x + self.w and self.y <= py < self.y + self.h):
            return False
        if self.r <= 0:
            return True
        cx = min(max(px, self.x + self.r), self.x + self.w - self.r)
        cy = min(max(py, self.y + self.r), self.y + self.h - self.r)
        return (px - cx) ** 2 + (py - cy) ** 2 <= self.r**2


BLUE: RGB = (0x00, 0x68, 0xB5)
WHITE: RGB = (0xFF, 0xFF, 0xFF)

# resources/fleetgui.svg, shape by shape; the 3-wide ring strokes are rectangles.
SHAPES: tuple[RoundRect, ...] = (
    RoundRect(2, 2, 60, 60, 12, BLUE),
    RoundRect(10, 14, 14, 10, 2, WHITE),
    RoundRect(40, 14, 14, 10, 2, WHITE),
    RoundRect(10, 40, 14, 10, 2, WHITE),
    RoundRect(40, 40, 14, 10, 2, WHITE),
    RoundRect(24, 17.5, 16, 3, 0, WHITE),  # M24 19 H40
    RoundRect(45.5, 24, 3, 16, 0, WHITE),  # M47 24 V40
    RoundRect(24, 43.5, 16, 3, 0, WHITE),  # M40 45 H24
    RoundRect(15.5, 24, 3, 16, 0, WHITE),  # M17 40 V24
)


def render(size: int) -> bytes:
    """The icon as ``size`` x ``size`` RGBA rows, top row first (straight alpha)."""
    scale = VIEWBOX / size
    n = SUPERSAMPLE
    out = bytearray()
    for row in range(size):
        for col in range(size):
            r = g = b = a = 0
            for sy in range(n):
                for sx in range(n):
                    px = (col + (sx + 0.5) / n) * scale
                    py = (row + (sy + 0.5) / n) * scale
                    color = None
                    for shape in SHAPES:  # later shapes paint over earlier ones
                        if shape.covers(px, py):
                            color = shape.color
                    if color is not None:
                        r, g, b, a = r + color[0], g + color[1], b + color[2], a + 1
            if a:
                out += bytes((r // a, g // a, b // a, (255 * a) // (n * n)))
            else:
                out += bytes(4)
    return bytes(out)


def png_bytes(size: int, rgba: bytes) -> bytes:
    """A minimal PNG (8-bit RGBA, no metadata, fixed zlib level: deterministic)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    stride = size * 4
    raw = b"".join(b"\x00" + rgba[y * stride : (y + 1) * stride] for y in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def bmp_entry(size: int, rgba: bytes) -> bytes:
    """An ICO image entry as a 32-bit BGRA DIB (bottom-up) with its 1-bit AND mask."""
    info = struct.pack("<IiiHHIIiiII", 40, size, size * 2, 1, 32, 0, 0, 0, 0, 0, 0)
    stride = size * 4
    pixels = bytearray()
    for y in reversed(range(size)):
        line = rgba[y * stride : (y + 1) * stride]
        for x in range(size):
            r, g, b, a = line[4 * x : 4 * x + 4]
            pixels += bytes((b, g, r, a))
    mask_stride = ((size + 31) // 32) * 4
    mask = bytes(mask_stride * size)  # all opaque: the alpha channel decides
    return info + bytes(pixels) + mask


def ico_bytes(images: dict[int, bytes]) -> bytes:
    """An ICO file holding one entry per size."""
    entries = []
    for size, rgba in sorted(images.items()):
        data = png_bytes(size, rgba) if size >= 256 else bmp_entry(size, rgba)
        entries.append((size, data))
    header = struct.pack("<HHH", 0, 1, len(entries))
    offset = len(header) + 16 * len(entries)
    directory = b""
    blobs = b""
    for size, data in entries:
        dim = 0 if size >= 256 else size
        directory += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
        blobs += data
    return header + directory + blobs


def build() -> dict[Path, bytes]:
    """Every file this script writes, with its content."""
    images = {size: render(size) for size in ICO_SIZES}
    return {ICO_PATH: ico_bytes(images), PNG_PATH: png_bytes(256, images[256])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the committed icon files are stale"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stale = []
    for path, data in build().items():
        if path.is_file() and path.read_bytes() == data:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            log.info("wrote %s (%d bytes)", path.relative_to(ROOT), len(data))
    if args.check and stale:
        log.error("stale: %s (run python packaging/make_icon.py)", ", ".join(map(str, stale)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
