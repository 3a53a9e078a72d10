"""Cheaper figures (issue 16): fast PNG compression, titles placed without measuring,
a warm-up that leaves nothing behind. Nothing is timed: these check the settings
that make the figures cheap, and that the figures still show their titles."""

from __future__ import annotations

import struct
from pathlib import Path

import matplotlib.image
import pytest
from test_plots import requests_table, timeseries_frame

from sim.metrics import figure_draw, plots
from sim.metrics.figure_draw import PNG_COMPRESS_LEVEL, TITLE_Y, Margins, agg_figure, save_png
from sim.metrics.stats import Slo


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, payload) of each chunk of a PNG file (after its 8-byte signature)."""
    found, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        found.append((data[at + 4 : at + 8], data[at + 8 : at + 8 + length]))
        at += 12 + length
    return found


def _zlib_level_class(path: Path) -> int:
    """FLEVEL of the image data's zlib header: 0 = fastest (levels 0-1), 2 = default (6)."""
    first_idat = next(payload for kind, payload in _chunks(path.read_bytes()) if kind == b"IDAT")
    return first_idat[1] >> 6


def test_the_png_is_compressed_at_the_fast_level(tmp_path: Path) -> None:
    fig = agg_figure(3, 2, Margins())
    fig.subplots().plot([0, 1], [1, 0])
    out = save_png(fig, tmp_path / "fast.png")
    assert out == tmp_path / "fast.png"
    assert PNG_COMPRESS_LEVEL == 1
    assert _zlib_level_class(out) == 0
    # For contrast, matplotlib's default writes zlib's default level (class 2).
    fig.savefig(tmp_path / "default.png")
    assert _zlib_level_class(tmp_path / "default.png") == 2


def test_fast_compression_loses_no_pixel(tmp_path: Path) -> None:
    fig = agg_figure(4, 3, Margins())
    fig.subplots().plot([0, 1, 2], [2, 0, 1])
    save_png(fig, tmp_path / "fast.png")
    fig.savefig(tmp_path / "default.png")
    fast = matplotlib.image.imread(tmp_path / "fast.png")
    default = matplotlib.image.imread(tmp_path / "default.png")
    assert fast.shape == default.shape == (3 * figure_draw.DPI, 4 * figure_draw.DPI, 4)
    assert (fast == default).all()


def _drawn_figure(tmp_path: Path, which: str) -> object:
    """Draw one run figure, keeping its Figure (save_png is spied on)."""
    kept: list[object] = []
    original = figure_draw.save_png

    def keep(fig: object, path: Path) -> Path:
        kept.append(fig)
        return original(fig, path)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figure_draw, "save_png", keep)
        if which == "cdf":
            figure_draw.draw_latency_cdfs(
                plots.cdf_data(requests_table(300), Slo(ttft_ms=300)), tmp_path / "cdf.png"
            )
        else:
            figure_draw.draw_timeseries(
                plots.timeseries_data(timeseries_frame(400)), tmp_path / "ts.png"
            )
    return kept[0]


@pytest.mark.parametrize("which", ["cdf", "timeseries"])
def test_titles_sit_at_the_fixed_height_just_above_their_axes(tmp_path: Path, which: str) -> None:
    fig = _drawn_figure(tmp_path, which)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    titles = 0
    for ax in fig.axes:  # type: ignore[attr-defined]
        top_px = ax.get_window_extent(renderer).y1
        for title in (ax.title, ax._left_title, ax._right_title):
            if not title.get_text():
                continue
            titles += 1
            assert title.get_position()[1] == TITLE_Y
            box = title.get_window_extent(renderer)
            assert top_px <= box.y0 <= top_px + 20  # the default pad, 6 pt = 10 px at 120 dpi
    # timeseries: three panel titles and the KV panel's right-hand one (its peak, the axis range).
    assert titles == (2 if which == "cdf" else 4)


def test_the_warm_up_draws_nothing_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    figure_draw.warm_up()
    assert list(tmp_path.iterdir()) == []
