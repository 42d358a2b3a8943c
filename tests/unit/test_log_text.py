"""Reading a whole log for `--once` (sources.log_text): bounded, and saying what was left out."""

from __future__ import annotations

import io
from pathlib import Path

from kvtop.report.plain_output import PlainWriter, plain, takes_unicode
from kvtop.sources.log_text import log_lines


def test_a_file_over_the_limit_is_read_from_its_latest_part(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    lines = [f"line {i:04d}\n" for i in range(1000)]  # 10 bytes each
    log.write_text("".join(lines))
    with log_lines(str(log), limit_chars=2005) as text:
        got = list(text)
    # The last 2005 bytes start 5 bytes into a line: that piece is dropped.
    assert got == lines[-200:]
    assert text.cut is not None
    assert f"{log} is longer than kvtop reads at once" in text.cut
    assert "its last" in text.cut


def test_a_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "small.log"
    log.write_text("a\nb\n")
    with log_lines(str(log), limit_chars=4) as text:
        assert list(text) == ["a\n", "b\n"]
    assert text.cut is None


def test_an_endless_stream_stops_at_the_limit() -> None:
    with log_lines("/dev/urandom", limit_chars=1 << 20) as text:
        got = sum(len(line) for line in text)
    assert got <= 1 << 20
    assert text.cut is not None and "/dev/urandom did not end within 1 MiB" in text.cut


def test_an_endless_line_stops_at_the_limit() -> None:
    with log_lines("/dev/zero", limit_chars=3 << 20) as text:
        got = list(text)
    assert len(got) == 1 and text.cut is not None  # the line's start, kept; the rest skipped


def test_plain_writer_on_an_ascii_stream() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    assert not takes_unicode(stream)
    PlainWriter(stream).write("log ● ok · nvml ◐ · KV … 3 × 2 ±0.005 → Кими\n")  # type: ignore[arg-type]
    stream.flush()
    assert raw.getvalue() == b"log * ok | nvml ~ | KV ~ 3 x 2 +/-0.005 -> ????\n"
    assert takes_unicode(io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    assert plain("—") == "-"
