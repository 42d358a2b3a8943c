"""The stacked memory bar as runs: exactly the width, the reserve mark in the cell where the
reserve begins, neighbouring runs of one style drawn as one."""

from __future__ import annotations

from rich.style import Style

from kvtop.live.widgets.stacked_bar import (
    GLYPHS,
    RESERVE_MARK,
    bar_pieces,
    joined,
    pieces_text,
)

STYLES = {name: Style(color=f"color({i})") for i, name in enumerate(GLYPHS)}
MARK = Style(bold=True, color="red")


def _style(name: str) -> Style:
    return STYLES[name]


def test_the_runs_fill_the_width_in_segment_order() -> None:
    segments = [("weights", 60.0), ("KV cache", 20.0), ("free", 20.0)]
    pieces = bar_pieces(segments, 100.0, 20, _style)
    assert [(w, s) for w, s in pieces] == [
        (GLYPHS["weights"] * 12, STYLES["weights"]),
        (GLYPHS["KV cache"] * 4, STYLES["KV cache"]),
        (GLYPHS["free"] * 4, STYLES["free"]),
    ]


def test_the_reserve_mark_takes_one_cell_inside_the_run_it_falls_in() -> None:
    # The reserve starts at 70 GiB: the last cell of the KV run that ends there... here at 70
    # of 100 GiB inside the KV segment (60-80), so the mark cuts that run in two.
    segments = [("weights", 60.0), ("KV cache", 20.0), ("free", 20.0)]
    pieces = bar_pieces(segments, 100.0, 20, _style, 70.0, MARK)
    plain = "".join(w for w, _ in pieces)
    assert len(plain) == 20
    at = plain.index(RESERVE_MARK)
    assert at == 13  # cell 12 is the KV run's first; 70 GiB is half way: its second cell
    assert plain == GLYPHS["weights"] * 12 + GLYPHS["KV cache"] + RESERVE_MARK + (
        GLYPHS["KV cache"] * 2 + GLYPHS["free"] * 4
    )
    assert (RESERVE_MARK, MARK) in pieces
    kv = [w for w, s in pieces if s == STYLES["KV cache"]]
    assert kv == [GLYPHS["KV cache"], GLYPHS["KV cache"] * 2]


def test_the_mark_in_the_unfilled_end_of_a_bar() -> None:
    # Segments that sum to less than the card: the rest is blank; a reserve past the segments
    # is marked where they end, and the blank run goes on after the mark.
    segments = [("weights", 50.0)]
    pieces = bar_pieces(segments, 100.0, 10, _style, 99.0, MARK)
    assert pieces == [
        (GLYPHS["weights"] * 5, STYLES["weights"]),
        (RESERVE_MARK, MARK),
        ("    ", None),
    ]


def test_the_text_of_the_runs_is_the_bar() -> None:
    segments = [("weights", 60.0), ("KV cache", 20.0), ("free", 20.0)]
    pieces = bar_pieces(segments, 100.0, 20, _style, 70.0, MARK)
    text = pieces_text(pieces)
    assert text.plain == "".join(w for w, _ in pieces)
    assert text.cell_len == 20
    assert any(span.style == MARK for span in text.spans)


def test_neighbouring_runs_of_one_style_join() -> None:
    a, b = Style(color="red"), Style(color="blue")
    assert joined([("x", a), ("y", a), ("", b), ("z", None), (" ", None), ("w", b)]) == [
        ("xy", a),
        ("z ", None),
        ("w", b),
    ]
    assert pieces_text(joined([("x", a), ("y", None)])).plain == "xy"
