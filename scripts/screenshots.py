"""Write screenshots/ from the embedded demo: the --once report as SVG (and PNG if rsvg-convert)."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

from rich.console import Console

from tui.model.analysis import analyse
from tui.report.text import print_report
from tui.session import DEMO_LOG
from tui.sglang.story import fold_lines

OUT = Path(__file__).resolve().parent.parent / "screenshots"


def main() -> None:
    with resources.as_file(resources.files("tui.data") / DEMO_LOG) as path, path.open() as lines:
        report = analyse(fold_lines(lines), "demo: " + DEMO_LOG)
    console = Console(record=True, width=110, file=open("/dev/null", "w"))  # noqa: SIM115
    print_report(report, console)
    svg = OUT / "once-report-demo.svg"
    console.save_svg(str(svg), title="kvtop --once --demo")
    print(f"wrote {svg}")
    if shutil.which("rsvg-convert"):
        png = svg.with_suffix(".png")
        subprocess.run(["rsvg-convert", "-o", str(png), str(svg)], check=True)
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
