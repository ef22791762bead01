"""A small PNG decoder for screenshot checks (8-bit grey, RGB or RGBA, not interlaced), on numpy: no image
library needed in the test extras."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type -> samples per pixel


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: np.ndarray  # height x (width * channels) bytes

    def pixels(self) -> np.ndarray:
        """One row per pixel, one column per channel."""
        return self.rows.reshape(-1, self.channels)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter_row(kind: int, line: np.ndarray, previous: np.ndarray, bpp: int) -> np.ndarray:
    """One row's bytes with PNG filter `kind` undone (uint8 arithmetic wraps, as PNG's does)."""
    if kind == 0:
        return line
    if kind == 2:
        return line + previous
    if kind == 1:  # each byte adds the reconstructed one bpp to its left: a running sum per channel
        return np.cumsum(line.reshape(-1, bpp), axis=0, dtype=np.uint8).reshape(-1)
    out = bytearray(line.tobytes())
    up = previous.tobytes()
    for i in range(len(out)):
        left = out[i - bpp] if i >= bpp else 0
        corner = up[i - bpp] if i >= bpp else 0
        if kind == 3:
            out[i] = (out[i] + (left + up[i]) // 2) & 0xFF
        elif kind == 4:
            out[i] = (out[i] + _paeth(left, up[i], corner)) & 0xFF
        else:
            raise ValueError(f"unknown PNG filter {kind}")
    return np.frombuffer(bytes(out), dtype=np.uint8)


def _unfilter(data: bytes, width: int, height: int, bpp: int) -> np.ndarray:
    stride = width * bpp
    raw = np.frombuffer(data, dtype=np.uint8).reshape(height, stride + 1)
    rows = np.zeros((height, stride), dtype=np.uint8)
    previous = rows[0]
    for y in range(height):
        rows[y] = _unfilter_row(int(raw[y, 0]), raw[y, 1:], previous, bpp)
        previous = rows[y]
    return rows


def read_png(blob: bytes) -> Image:
    if not blob.startswith(SIGNATURE):
        raise ValueError("not a PNG file")
    pos, header, idat = len(SIGNATURE), b"", bytearray()
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos:pos + 4])
        kind, body = blob[pos + 4:pos + 8], blob[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}")
    channels = CHANNELS[colour]
    return Image(width, height, channels, _unfilter(zlib.decompress(bytes(idat)), width, height, channels))
