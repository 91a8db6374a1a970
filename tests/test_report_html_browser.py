"""The HTML report renders in a real headless browser (Debian's chromium): the screenshot has the
window's size, is not blank, and shows the charts' backend colours. Skipped without chromium
(install: `apt-get install -y chromium`). The PNG is decoded here with zlib + numpy (no Pillow)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app
from attnsel.reports.tune.html_charts import PALETTE

FIXTURES = Path(__file__).parent / "fixtures" / "report"
WIDTH, HEIGHT = 1400, 2000
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")


def _unfilter_sequential(kind: int, line: list[int], prev: list[int], bpp: int) -> np.ndarray:
    """PNG filters 3 (Average) and 4 (Paeth), which depend on the pixel just decoded."""
    row = [0] * len(line)
    for i, x in enumerate(line):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            row[i] = (x + ((a + b) >> 1)) & 255
            continue
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        row[i] = (x + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return np.array(row, dtype=np.uint8)


def read_png_rgb(path: Path) -> np.ndarray:
    """8-bit RGB/RGBA, non-interlaced PNG (what chromium writes) -> array (height, width, 3)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    width, height, depth, colour_type, _c, _f, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(height, width * bpp + 1)
    pixels = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.uint8)
    for y in range(height):
        kind, line = int(raw[y, 0]), raw[y, 1:]
        if kind == 0:
            row = line
        elif kind == 1:  # Sub: running sum per channel, modulo 256
            row = np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.uint8).reshape(-1)
        elif kind == 2:  # Up
            row = line + prev
        else:
            row = _unfilter_sequential(kind, line.tolist(), prev.tolist(), bpp)
        pixels[y] = row
        prev = pixels[y]
    return pixels.reshape(height, width, bpp)[:, :, :3]


def _hex_rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def _screenshot(html: Path, png: Path, tmp_path: Path, height: int = HEIGHT) -> None:
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={WIDTH},{height}", html.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert png.exists(), f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-500:]}"


def test_tune_report_renders_in_chromium_with_its_charts(tmp_path):
    html = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(FIXTURES / "h200_llama8b_synthetic"),
                                      str(FIXTURES / "explain_llama8b_t4_block8_fp8.json"), "-o", str(html)])
    assert result.exit_code == 0, result.output
    png = tmp_path / "report.png"
    _screenshot(html, png, tmp_path)

    pixels = read_png_rgb(png)
    assert pixels.shape == (HEIGHT, WIDTH, 3)
    flat = pixels.reshape(-1, 3)
    packed = (flat[:, 0].astype(np.uint32) << 16) | (flat[:, 1].astype(np.uint32) << 8) | flat[:, 2]
    distinct = np.unique(packed)
    # A blank or unstyled page has a handful of colours; text antialiasing + charts give hundreds.
    assert len(distinct) > 200
    white = np.mean(packed == 0xFFFFFF)
    assert 0.3 < white < 0.98, f"{white:.0%} of the page is white"
    # The first two backends' chart colours (FLASH_ATTN, FLASHINFER lines and bars) are on screen.
    for colour in PALETTE[:2]:
        r, g, b = _hex_rgb(colour)
        assert np.count_nonzero(packed == (r << 16 | g << 8 | b)) > 200, f"{colour} missing: charts not drawn"


def test_explain_only_report_renders_the_reason_matrix(tmp_path):
    html = tmp_path / "explain.html"
    result = CliRunner().invoke(app, ["report", str(FIXTURES / "explain_llama8b_t4_block8_fp8.json"), "-o", str(html)])
    assert result.exit_code == 0, result.output
    png = tmp_path / "explain.png"
    _screenshot(html, png, tmp_path, height=700)
    pixels = read_png_rgb(png)
    assert pixels.shape == (700, WIDTH, 3)
    packed = (pixels[..., 0].astype(np.uint32) << 16) | (pixels[..., 1].astype(np.uint32) << 8) | pixels[..., 2]
    # refused cells of the backend x reason matrix are filled with the report's light red
    assert np.count_nonzero(packed == 0xFFD8D3) > 1000
