#!/usr/bin/env python3
"""Draws the dashboard's icons (add to home screen, favicon) with the standard library only.

Why a script and not an image editor: the icons are committed, and anyone must be able to
re-create them byte for byte without network access or Pillow. The PNGs are written with
``zlib`` + ``struct``; shapes are rounded rectangles with one-sample anti-aliasing from their
signed distance. The design: three white bars stacked as a pyramid (tier 0 broad at the bottom,
fewer higher tiers) on the dashboard's link blue.

Outputs (in app/web/static/, or the folder given as the first argument):
  icon.svg                 the scalable icon (rounded square), also the modern favicon
  icon-192.png, -512.png   manifest icons, purpose "any" (rounded square, transparent corners)
  icon-maskable-512.png    manifest icon, purpose "maskable" (full bleed; the glyph sits in the
                           central 80 % safe zone the platforms crop to)
  apple-touch-icon.png     180 px, full bleed (iOS rounds the corners itself; no transparency)
  favicon.ico              16, 32 and 48 px PNGs in one ICO (what /favicon.ico answers)

Run: python3 scripts/make-icons.py
"""

from __future__ import annotations

import math
import struct
import sys
import zlib
from pathlib import Path

BLUE = (0x1A, 0x5F, 0xB4)
WHITE = (0xFF, 0xFF, 0xFF)
# Bars in units of the icon's side, centred: (width, height, centre y). Every corner lies within
# 0.4 of the centre, the maskable safe zone's radius.
BARS = ((0.30, 0.10, -0.16), (0.46, 0.10, 0.0), (0.62, 0.10, 0.16))
BAR_RADIUS = 0.035
CORNER = 0.18  # the rounded square's corner radius, for the "any" icons

OUT = Path(__file__).resolve().parent.parent / "app" / "web" / "static"


def rounded_rect_sdf(x: float, y: float, cx: float, cy: float, half_w: float, half_h: float, r: float) -> float:
    """Signed distance (negative inside) from (x, y) to a rounded rectangle."""
    qx = abs(x - cx) - (half_w - r)
    qy = abs(y - cy) - (half_h - r)
    outside = math.hypot(max(qx, 0.0), max(qy, 0.0))
    return outside + min(max(qx, qy), 0.0) - r


def coverage(sdf_px: float) -> float:
    return min(1.0, max(0.0, 0.5 - sdf_px))


def draw(size: int, *, full_bleed: bool) -> bytes:
    """RGBA rows (with PNG filter bytes) of the icon at ``size`` pixels."""
    rows = bytearray()
    half = size / 2
    for py in range(size):
        rows.append(0)  # filter: none
        y = py + 0.5
        for px in range(size):
            x = px + 0.5
            if full_bleed:
                bg = 1.0
            else:
                bg = coverage(rounded_rect_sdf(x, y, half, half, half, half, CORNER * size))
            fg = 0.0
            for width, height, centre in BARS:
                d = rounded_rect_sdf(x, y, half, half + centre * size, width * size / 2, height * size / 2,
                                     BAR_RADIUS * size)
                fg = max(fg, coverage(d))
            fg = min(fg, bg)
            rgb = [round(b * (1 - fg / bg) + w * (fg / bg)) if bg else 0 for b, w in zip(BLUE, WHITE, strict=True)]
            rows.extend((*rgb, round(bg * 255)))
    return bytes(rows)


def png(size: int, *, full_bleed: bool) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(draw(size, full_bleed=full_bleed), 9)) + chunk(b"IEND", b""))


def ico(sizes: tuple[int, ...]) -> bytes:
    """An ICO holding one PNG per size (valid since Windows Vista; every browser reads it)."""
    images = [png(s, full_bleed=False) for s in sizes]
    out = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    for s, data in zip(sizes, images, strict=True):
        out += struct.pack("<BBBBHHII", s % 256, s % 256, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    return out + b"".join(images)


def svg() -> str:
    def n(v: float) -> str:
        return f"{v * 100:g}"

    bars = "".join(
        f'<rect x="{n(0.5 - w / 2)}" y="{n(0.5 + c - h / 2)}" width="{n(w)}" height="{n(h)}" rx="{n(BAR_RADIUS)}"/>'
        for w, h, c in BARS)
    return ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">'
            '<title>TierOps</title>'
            f'<rect width="100" height="100" rx="{n(CORNER)}" fill="#{"".join(f"{c:02x}" for c in BLUE)}"/>'
            f'<g fill="#ffffff">{bars}</g></svg>\n')


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "icon.svg": svg().encode(),
        "icon-192.png": png(192, full_bleed=False),
        "icon-512.png": png(512, full_bleed=False),
        "icon-maskable-512.png": png(512, full_bleed=True),
        "apple-touch-icon.png": png(180, full_bleed=True),
        "favicon.ico": ico((16, 32, 48)),
    }
    for name, data in files.items():
        (out / name).write_bytes(data)
        print(f"{out / name} ({len(data)} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
