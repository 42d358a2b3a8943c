"""What a new user sees after typing `./scripts/demo.sh`: a timeline of the terminal, in tmux.

    python bench/bench_first_contact.py            # a fresh clone (sets up its own .venv)
    python bench/bench_first_contact.py --ready    # this checkout, its .venv already set up

Runs `./scripts/demo.sh` in a detached 120x40 tmux pane (a private server) and polls the pane
every 50 ms. Prints each moment the screen changed with the seconds since the command started
and the lines that appeared (the set-up's progress lines, then the live view), then:
- first output: the first time anything is on the screen;
- longest silence: the longest stretch with no change on the screen before the live view;
- first frame: the first screen that shows the demo's live view (its `DEMO` marker and the
  GPU rows 0..7).
A fresh clone is `git clone` of this checkout's HEAD into a temporary directory (removed after).
Asserts nothing; quits the demo with `q` once the first frame is in.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.tmux_tools import private_server  # noqa: E402

POLL_S = 0.05
GPU_ROW = re.compile(r"^[▶ ]*([0-7])\s+(?:TP\d|—)", re.MULTILINE)


def live_view(screen: str) -> bool:
    rows = {int(m) for m in GPU_ROW.findall(screen)}
    return "DEMO" in screen and rows >= set(range(8))


def timeline(checkout: Path, deadline_s: float) -> None:
    with private_server("kvtop-first-contact", checkout) as tmux:
        start = time.monotonic()
        tmux.new_session("demo", "./scripts/demo.sh", 120, 40)
        seen: list[str] = []
        last_change = first_output = None
        longest = (0.0, 0.0)  # silence length, ending at
        first_frame = None
        while time.monotonic() - start < deadline_s:
            screen = tmux.capture("demo", history=True)
            now = time.monotonic() - start
            lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
            if lines != seen:
                if first_output is None:
                    first_output = now
                gap = now - (last_change if last_change is not None else 0.0)
                if gap > longest[0] and first_frame is None:
                    longest = (gap, now)
                last_change = now
                new = [line for line in lines if line not in seen]
                if live_view(screen):
                    first_frame = now
                    print(f"{now:7.2f} s  [the live view: {len(lines)} lines]")
                    break
                for line in new[:6]:
                    print(f"{now:7.2f} s  {line[:100]}")
                seen = lines
            time.sleep(POLL_S)
        if first_frame is not None:
            tmux.send("demo", "q")
        else:
            print("no live view within the deadline; last screen:")
            print(tmux.capture("demo", history=True))
    print()
    print(f"first output    {first_output if first_output is None else f'{first_output:.2f} s'}")
    print(f"longest silence {longest[0]:.2f} s (ending at {longest[1]:.2f} s)")
    print(f"first frame     {first_frame if first_frame is None else f'{first_frame:.2f} s'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ready", action="store_true", help="this checkout, .venv already set up")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds (default 600)")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("bench_first_contact: needs tmux (apt-get install tmux).")
    if args.ready:
        timeline(ROOT, args.deadline)
        return
    with tempfile.TemporaryDirectory(prefix="kvtop-first-contact-") as tmp:
        clone = Path(tmp) / "kvtop"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        timeline(clone, args.deadline)


if __name__ == "__main__":
    main()
