"""The floor under any Textual app here: one Static updated once a second, nothing else.

bench_vs_nvitop.py runs it next to kvtop and nvitop, so each run shows how much of kvtop's CPU
is Textual's own (its message loop, timers and compositor) rather than kvtop's work.
"""

from __future__ import annotations

import time

from textual.app import App, ComposeResult
from textual.widgets import Static


class Floor(App[None]):
    def compose(self) -> ComposeResult:
        yield Static(time.strftime("floor %H:%M:%S"), id="clock")

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)

    def tick(self) -> None:
        self.query_one("#clock", Static).update(time.strftime("floor %H:%M:%S"))


if __name__ == "__main__":
    Floor().run()
