"""The timeline's painter: what it draws in fewer calls is the picture its parts drawn one by one make, and what
it skips would have drawn nothing."""

from __future__ import annotations

import math
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pytestqt", reason="pytest-qt is not installed")
from nicrig.gui.timeline import Batch, LaneItem, draw_lines, draw_rects, groups, room_between
from PySide6 import QtCore, QtGui

SIZE = (700, 160)


def _runs(rng: np.random.Generator, t0: float, span: float, px: float) -> list[tuple]:
    """Logic lanes' runs as the overview gives them: one after another without gaps, no two equal states in a row,
    their edges at pixel columns or anywhere, some starting before the view or ending after it."""
    lanes = []
    for lane in range(int(rng.integers(1, 5))):
        n = int(rng.integers(1, 80))
        edges = np.sort(rng.uniform(t0 - 0.1 * span, t0 + 1.1 * span, n + 1))
        if rng.random() < 0.5:
            edges = t0 + np.round((edges - t0) / px) * px
        state = rng.integers(0, 3, n).astype(np.int8)
        new = np.concatenate(([True], state[1:] != state[:-1]))
        starts = edges[:-1][new]
        lanes.append((starts, np.concatenate((starts[1:], edges[-1:])), state[new], lane + 0.2, lane + 0.8))
    return lanes


def _one_by_one(p: QtGui.QPainter, lanes: list[tuple]) -> None:
    """Each run on its own: a held level's line; a changing stretch filled, then its four sides; a mark where a held
    level changes to the other."""
    p.setPen(QtCore.Qt.PenStyle.NoPen)
    p.setBrush(LaneItem.BUSY)
    for x0, x1, state, hi, lo in lanes:
        busy = state == 2
        draw_rects(p, x0[busy], x1[busy], hi, lo)
    p.setPen(LaneItem.LINE)
    for x0, x1, state, hi, lo in lanes:
        for k in range(len(x0)):
            a, b = np.array([x0[k]]), np.array([x1[k]])
            if state[k] == 2:
                for ya, bb, yb, aa in ((hi, b, hi, a), (lo, b, lo, a), (hi, a, lo, a), (hi, b, lo, b)):
                    draw_lines(p, aa, ya, bb, yb)
            else:
                y = hi if state[k] == 1 else lo
                draw_lines(p, a, y, b, y)
                if k + 1 < len(x0) and state[k + 1] != 2 and state[k + 1] != state[k]:
                    draw_lines(p, b, hi, b, lo)


def _picture(paint, transform: QtGui.QTransform) -> np.ndarray:
    img = QtGui.QImage(*SIZE, QtGui.QImage.Format.Format_ARGB32_Premultiplied)
    img.fill(QtGui.QColor("white"))
    p = QtGui.QPainter(img)
    p.setTransform(transform)
    paint(p)
    p.end()
    return np.frombuffer(img.constBits(), np.uint32).reshape(SIZE[1], SIZE[0]).copy()


def _view(seed: int) -> tuple[np.random.Generator, int, float, float, float, QtGui.QTransform]:
    """A random view: its generator, pixels, start and span (ns), a pixel (ns), and the painter's transform (a
    few ns to a second wide, its edges anywhere in a pixel, lanes a lane unit apart)."""
    rng = np.random.default_rng(seed)
    pixels = int(rng.integers(200, SIZE[0] - 60))
    t0, span = rng.uniform(-1e9, 1e9), 10 ** rng.uniform(1, 9)
    sx = (pixels + rng.uniform(0, 1)) / span
    transform = QtGui.QTransform(sx, 0, 0, rng.uniform(20, 35), 30 + rng.uniform(0, 1) - t0 * sx, rng.uniform(0, 2))
    return rng, pixels, t0, span, span / pixels, transform


@pytest.mark.parametrize("seed", range(40))
def test_logic_lanes_joined_lines_draw_the_runs_one_by_one_picture(qapp, seed: int) -> None:
    """The batch draws a lane's high level and its changing stretches' tops as one line where they follow one
    another (and the low level and their bottoms): the same pixels as every run's lines drawn alone, at views
    from a few ns to a second wide, the view's edges anywhere in a pixel."""
    rng, pixels, t0, span, px, transform = _view(seed)
    lanes = _runs(rng, t0, span, px)

    def batched(p: QtGui.QPainter) -> None:
        batch = Batch()
        batch.runs = lanes
        batch.draw(p)

    one_by_one = _picture(lambda p: _one_by_one(p, lanes), transform)
    assert (one_by_one != one_by_one[0, 0]).any()  # something is drawn
    np.testing.assert_array_equal(_picture(batched, transform), one_by_one)


@settings(max_examples=200, deadline=None)
@given(gaps=st.lists(st.floats(0, 60), min_size=1, max_size=30), widths=st.lists(st.floats(0, 30), min_size=30,
                                                                                   max_size=30),
       right=st.floats(0, 80), room=st.floats(1, 40))
def test_no_room_between_dense_spans_leaves_no_group_to_name(gaps: list[float], widths: list[float], right: float,
                                                             room: float) -> None:
    """Where :func:`room_between` finds no gap of ``room`` pixels, the label pass's groups (things less than
    ``room`` apart) have no ``room`` beside any of them: skipping the pass loses no word."""
    px0 = np.cumsum(np.array(gaps)) + np.concatenate(([0.0], np.cumsum(widths[:len(gaps) - 1])))
    px1 = px0 + np.array(widths[:len(gaps)])
    left, right_edge = 0.0, float(px1[-1]) + right
    g0, g1, _ = groups(px0, px1, np.ones(len(px0), bool), room)
    after = np.minimum(np.concatenate((g0[1:], [right_edge])), right_edge)
    before = np.maximum(np.concatenate(([left], g1[:-1])), left)
    nameable = bool((np.maximum(after - g1, g0 - before) >= room).any())
    assert room_between(px0, px1, left, right_edge, room) or not nameable


@settings(max_examples=50, deadline=None)
@given(things=st.lists(st.tuples(st.floats(0, 400), st.floats(0, 40), st.booleans()), min_size=1, max_size=40),
       gap=st.floats(0, 30))
def test_groups_are_the_things_less_than_the_gap_apart_taken_in_order(things: list[tuple[float, float, bool]],
                                                                     gap: float) -> None:
    """:func:`groups` gives, from left to right, each run of things (by their lefts) whose next one starts within
    ``gap`` pixels of the furthest right so far: its left, its furthest right, and whether every one is flagged."""
    px0 = np.array([t[0] for t in things])
    px1 = px0 + np.array([t[1] for t in things])
    flag = np.array([t[2] for t in things])
    expected: list[list] = []
    for i in np.argsort(px0, kind="stable"):
        if expected and px0[i] <= expected[-1][1] + gap:
            expected[-1][1] = max(expected[-1][1], px1[i])
            expected[-1][2] = expected[-1][2] and flag[i]
        else:
            expected.append([px0[i], px1[i], bool(flag[i])])
    g0, g1, all_flagged = groups(px0, px1, flag, gap)
    assert [[a, b, bool(f)] for a, b, f in zip(g0, g1, all_flagged)] == expected


@pytest.mark.parametrize("seed", range(40))
def test_dense_spans_filled_paint_what_each_outlined_alone_paints(qapp, seed: int) -> None:
    """Dense spans (runs of pixel columns of one style, the styles' layers over one another as the batch orders
    them) filled with :func:`pixel_spans`'s rectangles paint the same pixels as each span drawn alone as the
    outlined rectangle it was (a 1-px cosmetic pen and a brush of its style's colour) with its edges in the pixels
    they fall in, at views from a few ns to a second wide, the view's edges anywhere in a pixel."""
    from nicrig.gui.lanes import STYLE_NAMES, STYLES
    from nicrig.gui.timeline import _cosmetic

    rng, pixels, t0, span, px, transform = _view(seed)
    spans = []  # (style, x0, x1, top, bottom) in item coordinates: pixel columns' edges, lanes' bands
    for lane in range(int(rng.integers(1, 4))):
        cols = rng.integers(-1, 3, pixels + 2)
        cols = np.repeat(cols, rng.integers(1, 12, len(cols)))[:pixels + 2]  # runs of one style, some abutting
        change = np.flatnonzero(np.concatenate(([True], cols[1:] != cols[:-1])))
        ends = np.concatenate((change[1:] - 1, [len(cols) - 1]))
        for a, b in zip(change, ends):
            if cols[a] >= 0:
                spans.append((int(cols[a]), t0 + (a - 1) * px, t0 + b * px, lane + 0.12, lane + 0.88))

    def batched(p: QtGui.QPainter) -> None:
        batch = Batch()
        for style, x0, x1, top, bottom in spans:
            batch.add(f"dense:{STYLE_NAMES[style]}", np.array([x0]), top, np.array([x1]), bottom)
        batch.draw(p)

    def one_by_one(p: QtGui.QPainter) -> None:
        inverse = transform.inverted()[0]
        for style in range(len(STYLE_NAMES)):
            fill = STYLES[STYLE_NAMES[style]][0]
            p.setPen(_cosmetic(fill))
            p.setBrush(QtGui.QBrush(QtGui.QColor(fill)))
            for s, x0, x1, top, bottom in spans:
                if s != style:
                    continue
                # the edges a quarter pixel into the pixels they fall in: where the raster engine's rounding of
                # an outline is not in doubt
                corners = [transform.map(QtCore.QPointF(x, y)) for x, y in ((x0, top), (x1, bottom))]
                snapped = [QtCore.QPointF(math.floor(c.x()) + 0.25, math.floor(c.y()) + 0.25) for c in corners]
                p.drawRect(QtCore.QRectF(*(inverse.map(c) for c in snapped)))

    expected = _picture(one_by_one, transform)
    assert (expected != expected[0, 0]).any()  # something is drawn
    np.testing.assert_array_equal(_picture(batched, transform), expected)


def test_changing_stretches_filled_opaque_paint_the_translucent_fill_over_the_background(qapp) -> None:
    """The changing stretches' opaque brush paints, over the view's background, what the line's green at 110/255
    painted (within the raster engine's rounding of a blend: one level a channel)."""
    from nicrig.gui.timeline import BACKGROUND

    def filled(brush: QtGui.QBrush) -> np.ndarray:
        img = QtGui.QImage(*SIZE, QtGui.QImage.Format.Format_ARGB32_Premultiplied)
        img.fill(QtGui.QColor(BACKGROUND))
        p = QtGui.QPainter(img)
        p.setPen(QtCore.Qt.PenStyle.NoPen)
        p.setBrush(brush)
        draw_rects(p, np.array([10.0, 300.0]), np.array([200.0, 301.0]), 20.0, 90.0)
        p.end()
        return np.frombuffer(img.constBits(), np.uint8).reshape(SIZE[1], SIZE[0], 4).astype(int)

    translucent = filled(QtGui.QBrush(QtGui.QColor(27, 94, 32, 110)))
    opaque = filled(LaneItem.BUSY)
    assert LaneItem.BUSY.color().alpha() == 255
    assert (translucent != translucent[0, 0]).any()
    assert np.abs(opaque - translucent).max() <= 1


def test_levels_give_each_line_as_its_pixels_and_neighbouring_edges_as_one_rectangle() -> None:
    from nicrig.gui import _levels

    x = np.arange(3, dtype=np.float64)
    state = np.array([0, 2, 1], np.int8)
    pixels, lines, fills = np.empty((15, 4), np.int32), np.empty((15, 4)), np.empty((3, 4))
    one = np.ones(1)
    # low, changing, high: the low line to the stretch's end, the high one from its start, its two sides, its fill
    assert _levels.levels(x, x + 1, state, np.array([3]), one, one * 2, 10.0, 0.0, 10.0, 0.0, pixels, lines,
                          fills) == (4, 0, 1)
    assert sorted(map(tuple, pixels[:4].tolist())) == [(0, 20, 20, 20), (10, 10, 10, 20), (10, 10, 30, 10),
                                                       (20, 10, 20, 20)]
    # the stretch two pixels wide: its sides in neighbouring columns are one rectangle, and it is not filled
    assert _levels.levels(x, x + 1, state, np.array([3]), one, one * 2, 1.0, 0.0, 10.0, 0.0, pixels, lines,
                          fills) == (3, 0, 0)
    assert (1, 10, 2, 20) in map(tuple, pixels[:3].tolist())


def test_levels_refuse_runs_their_counts_do_not_add_up_to() -> None:
    from nicrig.gui import _levels

    x = np.arange(3, dtype=np.float64)
    state = np.array([0, 2, 1], np.int8)
    pixels, lines, fills = np.empty((15, 4), np.int32), np.empty((15, 4)), np.empty((3, 4))
    one = np.ones(1)
    with pytest.raises(ValueError, match="counts add up"):
        _levels.levels(x, x + 1, state, np.array([2]), one, one * 2, 10.0, 0.0, 10.0, 0.0, pixels, lines, fills)
    with pytest.raises(ValueError, match="room for 5 a run"):
        _levels.levels(x, x + 1, state, np.array([3]), one, one * 2, 10.0, 0.0, 10.0, 0.0, pixels[:14], lines, fills)
