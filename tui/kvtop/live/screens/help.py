"""Help: the keys, what each glyph of the memory bar means, and the state of every source."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kvtop.live.key_list import KeySection
from kvtop.live.screens.base import ShowsState
from kvtop.live.view_state import ViewState, header_words
from kvtop.live.widgets.stacked_bar import GLYPHS, RESERVE_MARK
from kvtop.model.snapshot import SourceState
from kvtop.model.status.identity import mismatch_text
from kvtop.model.status.levels import Level

# Lines no binding makes; every binding's line comes from the views' BINDINGS (tui/kvtop/live/key_list).
CLICK = ("click", "a GPU row selects it, a double click opens it; Shift+drag selects text to copy")
PALETTE = "command palette: every action by name (Theme, Save theme to config, Screenshot)"


MEANINGS = {
    "baseline": "in use before SGLang loaded anything (CUDA context, NCCL)",
    "other processes": "processes on the GPU that are not the server's, by their title, "
    "process tree and systemd unit (GPU detail lists them)",
    "weights": "the target model's weights (log: Load weight end)",
    "KV cache": "the target's KV cache (log: KV Cache is allocated)",
    "draft weights": "the speculative draft model's weights",
    "draft KV": "the draft's KV cache",
    "CUDA graphs": "captured CUDA graphs, target and draft",
    "runtime": "NVML in use minus all of the above: activations, allocator cache, buffers "
    "(the report's other startup allocations and what came since)",
    "in use": "used memory when no rank's log explains this GPU",
    "free": "free memory (NVML)",
    "mamba": "a hybrid model's Mamba/SSM state slots (log: Mamba Cache is allocated)",
    "other caches": "caches SGLang allocates beside the KV cache (Mamba intermediate states)",
}
HYBRID_SEGMENTS = ("mamba", "other caches")


def _has_segment(state: ViewState, name: str) -> bool:
    snapshot = state.snapshot
    gpus = snapshot.gpus if snapshot is not None else ()
    return any(name in dict(gpu.memory.segments()) for gpu in gpus)


class HelpScreen(ShowsState, ModalScreen[None]):
    BINDINGS = [  # noqa: RUF012
        Binding("escape,q,question_mark,f1", "close", "close", tooltip="close the help"),
    ]

    def __init__(self, sections: Sequence[KeySection] = ()) -> None:
        """`sections`: the views whose keys to list (the app's first: keys of every view)."""
        super().__init__()
        self.sections = tuple(sections)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(id="help-text")

    def on_mount(self) -> None:
        self._shown_on_mount()

    _sources_shown: object = None

    def show(self, state: ViewState) -> None:
        # The sources' states (and the server scraped) can change while help is open.
        snapshot = state.snapshot
        sources = (
            (
                snapshot.sources,
                snapshot.server,
                snapshot.kinded_notes,
                snapshot.mismatches,
                state.dismissed_notes,
                state.problem,
            )
            if snapshot is not None
            else None
        )
        if sources != self._sources_shown or self._sources_shown is None:
            self._sources_shown = sources
            self.query_one("#help-text", Static).update(self._content(state))

    def _content(self, state: ViewState) -> Group:
        keys = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
        keys.add_column(no_wrap=True, style="bold")
        keys.add_column()
        for number, section in enumerate(self.sections):
            if number:
                keys.add_row("", "")
            keys.add_row(Text(section.title, style="bold underline"), "")
            for key, meaning in section.lines():
                keys.add_row(key, meaning)
        glyphs = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
        glyphs.add_column(no_wrap=True)
        glyphs.add_column(no_wrap=True, style="bold")
        glyphs.add_column()
        for name, meaning in MEANINGS.items():
            if name in HYBRID_SEGMENTS and not _has_segment(state, name):
                continue  # a hybrid model's segments, explained only where one is drawn
            glyphs.add_row(GLYPHS[name] * 3, name, meaning)
        glyphs.add_row(
            RESERVE_MARK,
            "reserve",
            "where SGLang's reserve pre-load free × (1 − mem_fraction_static) begins",
        )
        sources = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
        sources.add_column(no_wrap=True, style="bold")
        sources.add_column(no_wrap=True)
        sources.add_column()
        snapshot = state.snapshot
        for health in snapshot.sources if snapshot else ():
            sources.add_row(health.name, health.state, Text(health.detail or ""))
        if snapshot is not None and snapshot.server is not None:
            sources.add_row("server", "", Text(snapshot.server.sentence()))
        if state.status is not None:  # what a narrow status line left out, whole
            sources.add_row("header", "", Text(header_words(state.status)))
        return Group(*self._top(keys, glyphs, sources), *self._notes(state), Text("\nEsc closes."))

    @staticmethod
    def _notes(state: ViewState) -> list[Text | Table]:
        """Every notice, the advisories too (dismissed or not): the one place they all are."""
        snapshot = state.snapshot
        if snapshot is None:
            return []
        lines = [(state.problem, "problem")] if state.problem else []
        lines += [(m, "mismatch") for m in mismatch_text(snapshot.mismatches)]
        for note in snapshot.kinded_notes:
            dismissed = note.advisory and note.kind in state.dismissed_notes
            lines.append((note.text, "advisory, dismissed" if dismissed else "note"))
        if not lines:
            return []
        table = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
        table.add_column(no_wrap=True, style="bold")
        table.add_column()
        for text, kind in lines:
            table.add_row(kind, Text(text))
        return [Text("\nnotes", style="bold"), table]

    @staticmethod
    def _top(keys: Table, glyphs: Table, sources: Table) -> tuple[Text | Table, ...]:
        warning, critical = Level.WARNING, Level.CRITICAL
        return (
            Text("kvtop keys (this view's first)", style="bold"),
            keys,
            Text("\nthe memory bar, left to right (GiB)", style="bold"),
            Text("every quantity's name, source and unit: docs/glossary.md", style="dim"),
            glyphs,
            Text(
                f"\na GPU row's alert: {warning.glyph} {warning}, {critical.glyph} {critical} "
                "(temperature; power against the enforced limit; free memory under the safe "
                "margin once the server is ready; a lost GPU), coloured and marked at the row's end"
            ),
            Text(f"\nsources ({'  '.join(f'{s.mark} {s}' for s in SourceState)})", style="bold"),
            sources,
        )

    def action_close(self) -> None:
        self.dismiss(None)
