"""Regenerate screenshots/ from the demo: the TUI's screens and the --once report, SVG + PNG.

    .venv/bin/python scripts/screenshots.py           # write screenshots/
    .venv/bin/python scripts/screenshots.py --check   # exit 1 when screenshots/ is out of date

The TUI shots are a still of the demo (tests/support/still.py: fixed clock, UTC, host name
"gpu-host"), so they change only when the UI does. PNGs need `rsvg-convert` (apt-get install
librsvg2-bin).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/support/still.py: the demo's still

from kvtop.live.app import KvtopApp  # noqa: E402
from kvtop.report.text import print_snapshot  # noqa: E402
from tests.support.still import STILL_EPOCH, StillFeed, still_series, still_snapshot  # noqa: E402

OUT = ROOT / "screenshots"

# name, terminal size, keys pressed before the shot, title
SHOTS: Sequence[tuple[str, tuple[int, int], Sequence[str], str]] = (
    ("overview", (120, 40), (), "kvtop --demo (120×40)"),
    ("overview-compact", (80, 24), (), "kvtop --demo (80×24, compact)"),
    ("gpu-detail", (120, 40), ("j", "j", "j", "enter"), "kvtop: GPU detail (Enter)"),
    ("formula", (120, 40), ("f",), "kvtop: the formula (f)"),
)


def png(svg: Path) -> None:
    if not shutil.which("rsvg-convert"):
        print("  (no rsvg-convert: PNG skipped; apt-get install librsvg2-bin)")
        return
    # Rich writes spaces as &#160; but rsvg still trims them at the start of a <text> unless
    # whitespace is declared significant.
    text = svg.read_text(encoding="utf-8").replace("<svg ", '<svg xml:space="preserve" ', 1)
    fixed = svg.with_suffix(".tmp.svg")
    fixed.write_text(text, encoding="utf-8")
    try:
        subprocess.run(["rsvg-convert", "-o", str(svg.with_suffix(".png")), str(fixed)], check=True)
    finally:
        fixed.unlink()
    print(f"wrote {svg.with_suffix('.png')}")


async def tui_shot(
    name: str, size: tuple[int, int], keys: Sequence[str], title: str, out: Path = OUT
) -> Path:
    app = KvtopApp(
        # Ten minutes of history for the sparklines, at the feed's interval (5 s): snapshots
        # further apart than 3 intervals would be drawn as gaps.
        StillFeed(*still_series(120), interval_s=5.0),
        source_label="demo",
        demo=True,
        clock=lambda: STILL_EPOCH,
        host_name="gpu-host",
    )
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        for field in app.screen.query("Input"):
            field.cursor_blink = False  # type: ignore[attr-defined]
        await pilot.pause(0.2)
        path = out / f"{name}.svg"
        path.write_text(app.export_screenshot(title=title), encoding="utf-8")
    if out == OUT:
        print(f"wrote {path}")
    return path


def report_shot(out: Path = OUT) -> Path:
    console = Console(record=True, width=110, file=open(os.devnull, "w"))  # noqa: SIM115
    print_snapshot(still_snapshot(), console)
    path = out / "once-report-demo.svg"
    console.save_svg(str(path), title="kvtop --once --demo")
    if out == OUT:
        print(f"wrote {path}")
    return path


def check() -> int:
    """Draw every shot into a temporary folder and compare with screenshots/: the SVGs are what
    the code draws now (the PNGs are made from them)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kvtop-shots-") as folder:
        fresh = Path(folder)
        made = [asyncio.run(tui_shot(*shot, out=fresh)) for shot in SHOTS]
        made.append(report_shot(fresh))
        stale = [
            path.name
            for path in made
            if not (OUT / path.name).is_file()
            or (OUT / path.name).read_bytes() != path.read_bytes()
        ]
    if stale:
        print(
            f"screenshots/ is out of date: {', '.join(stale)} no longer match what the code "
            "draws. Run `python scripts/screenshots.py` and commit screenshots/.",
            file=sys.stderr,
        )
        return 1
    print(f"screenshots/ matches what the code draws ({len(made)} shots)")
    return 0


def main(argv: Sequence[str] = ()) -> int:
    os.environ["TZ"] = "UTC"  # the demo's log times are local times
    time.tzset()
    if "--check" in argv:
        return check()
    OUT.mkdir(exist_ok=True)
    for shot in SHOTS:
        png(asyncio.run(tui_shot(*shot)))
    png(report_shot())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
