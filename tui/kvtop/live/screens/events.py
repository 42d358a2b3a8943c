"""The events pane: every event (newest first) or the raw log (e / l), scrolled, searched,
filtered, saved to a file or copied to the clipboard (OSC 52).

What it shows comes from tui/kvtop/model/event_view.py as plain lines; this screen only keeps the
operator's choices (mode, filters, query) and draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Static

from kvtop.live.key_list import KeyBar
from kvtop.live.screens.base import ShowsState
from kvtop.live.view_state import ViewState
from kvtop.live.widgets.lines_view import LinesView
from kvtop.live.widgets.status_line import StatusLine
from kvtop.model.event_view import (
    EVENTS,
    LOG,
    Filters,
    Line,
    cycled,
    event_lines,
    log_lines,
    matches,
    next_match,
    phases_of,
    ranks_of,
)
from kvtop.model.timeline import Timeline, timeline
from kvtop.model.verdict import Seen

# The keys line under the title, per mode: only keys that do something there (the raw log's
# lines have no phase, and what kvtop saw is an events list).
KEYS_HINT = {
    EVENTS: "l raw log  / search  n/N next/prev  r rank  p phase  x failures  k kvtop saw  "
    "s save  y copy  Esc back",
    LOG: "e events  / search  n/N next/prev  r rank  x failures  s save  y copy  Esc back",
}


MATCH = "the next / the previous match"


class EventsScreen(ShowsState, Screen[None]):
    APP_ACTIONS_OFF = frozenset({"toggle_compact", "events"})  # e and l are this view's own
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("escape", "close", "back", tooltip="back (closes the search field first)"),
        Binding("e", "mode('events')", "events", tooltip="every event, newest first"),
        Binding("l", "mode('log')", "raw log", tooltip="the raw log, oldest first, literally"),
        Binding("slash", "search", "search", tooltip="search (Enter finds, Esc cancels)"),
        Binding("n", "next_match(1)", "next match", show=False, tooltip=MATCH),
        Binding("N", "next_match(-1)", "previous match", show=False, tooltip=MATCH),
        Binding("r", "rank", "rank filter", show=False, tooltip="one rank's lines: the next rank"),
        Binding(
            "p", "phase", "phase filter", show=False, tooltip="one phase's events (events list)"
        ),
        Binding("x", "failures", "failures only", show=False, tooltip="failures only / all"),
        Binding(
            "k",
            "seen",
            "what kvtop saw",
            show=False,
            tooltip="only what kvtop saw: alerts, sources, GPUs, restarts (events list)",
        ),
        Binding("s", "save", "save", tooltip="save the lines shown to a new file"),
        Binding("y", "copy", "copy", tooltip="copy the lines shown (OSC 52)"),
    ]

    def __init__(
        self,
        mode: str,
        raw_lines: Callable[[], Sequence[str]],
        save: Callable[[str, str], tuple[str | None, str]],
    ) -> None:
        super().__init__()
        self._save = save  # (kind, text) -> (path or None, the sentence to show)
        self.mode = mode if mode in (EVENTS, LOG) else EVENTS
        self._raw = raw_lines
        self.filters = Filters()
        self.query_text = ""
        self.current: int | None = None
        self.lines: list[Line] = []
        self.events = Timeline(())
        self.seen: tuple[Seen, ...] = ()  # what kvtop saw (the snapshot's timeline)
        self._shown_key: object = None
        self.saved_to: str | None = None
        self.said: str | None = None  # why the last key did nothing, until the next key

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The key bar offers the other mode only (the one shown is already there)."""
        if action == "mode":
            return parameters[0] != self.mode
        return True

    def on_key(self) -> None:
        if self.said is not None:
            self.said = None
            self._bar()

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status", second_line=True)
        yield Static(id="events-bar")
        yield LinesView(id="events-lines")
        yield Input(id="events-search", placeholder="search (Enter: find, Esc: cancel)")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#events-search", Input).display = False
        self.query_one(LinesView).focus()
        self._shown_on_mount()

    # -- data -----------------------------------------------------------------------------------
    def show(self, state: ViewState) -> None:
        if state.status is not None:
            self.query_one(StatusLine).show(state.status)
        snapshot = state.snapshot
        analysis = snapshot.analysis if snapshot is not None else None
        raw = self._raw() if self.mode == LOG else ()
        seen = snapshot.timeline if snapshot is not None else ()
        key = (self.mode, self.filters, id(analysis), len(raw), raw[-1:] if raw else (), seen)
        if key == self._shown_key:
            return
        self._shown_key = key
        self.seen = seen
        if analysis is not None:
            self.events = timeline(analysis.startup)
        self._rebuild(raw)

    def _rebuild(self, raw: Sequence[str] | None = None) -> None:
        if self.mode == LOG:
            lines = log_lines(self._raw() if raw is None else raw, self.filters)
        else:
            lines = event_lines(self.events, self.filters, self.seen)
        self.lines = lines
        view = self.query_one(LinesView)
        view.set_lines(lines, keep_end=self.mode == LOG)
        self._search_again()
        self._bar()

    def _search_again(self) -> None:
        found = matches(self.lines, self.query_text)
        if self.current not in found:
            self.current = next_match(found, None, 1)
        self.query_one(LinesView).highlight(self.query_text, self.current)

    def _bar(self) -> None:
        title = "events, newest first" if self.mode == EVENTS else "raw log, oldest first"
        words = [f"{title} · {len(self.lines)} lines · filters: {self.filters.words()}"]
        if self.query_text:
            found = matches(self.lines, self.query_text)
            at = found.index(self.current) + 1 if self.current in found else 0
            words.append(f'"{self.query_text}": {at}/{len(found)} matches')
        if self.mode == LOG and not self.lines and not self._raw():
            words.append("no log lines yet (kvtop keeps the latest 5,000)")
        if self.saved_to:
            words.append(f"saved to {self.saved_to}")
        bar = self.query_one("#events-bar", Static)
        # Why the last key did nothing, in place of the keys line until the next key.
        bar.update(" " + " · ".join(words) + "\n " + (self.said or KEYS_HINT[self.mode]))

    # -- actions --------------------------------------------------------------------------------
    def action_close(self) -> None:
        search = self.query_one("#events-search", Input)
        if search.display:
            search.display = False
            self.query_one(LinesView).focus()
            return
        self.dismiss(None)

    def action_mode(self, mode: str) -> None:
        if mode != self.mode:
            self.refresh_bindings()  # the key bar offers the other mode now
            self.mode = mode
            f = self.filters
            self.filters = Filters(rank=f.rank, failures_only=f.failures_only)
            self._rebuild()
            view = self.query_one(LinesView)
            if mode == LOG:
                view.call_after_refresh(view.scroll_end, animate=False)
            else:
                view.scroll_home(animate=False)

    def action_search(self) -> None:
        search = self.query_one("#events-search", Input)
        search.display = True
        search.value = self.query_text
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        event.input.display = False
        self.query_text = event.value.strip()
        self.current = None
        self.query_one(LinesView).focus()
        self._search_again()
        self._bar()

    def action_next_match(self, step: int) -> None:
        if not self.query_text:
            self._say("no search yet: / searches")
            return
        self.current = next_match(matches(self.lines, self.query_text), self.current, step)
        self.query_one(LinesView).highlight(self.query_text, self.current)
        self._bar()

    def _filter(self, filters: Filters) -> None:
        self.filters = filters
        self._rebuild()

    def action_rank(self) -> None:
        rank = cycled(ranks_of(self.events.rows), self.filters.rank)
        self._filter(replace(self.filters, rank=rank, seen_only=False))

    def action_phase(self) -> None:
        if self.mode != EVENTS:  # not offered in the raw log (KEYS_HINT); typed anyway
            self._say("the raw log's lines have no phase: e shows the events list")
            return
        phase = cycled(phases_of(self.events.rows), self.filters.phase)
        self._filter(replace(self.filters, phase=phase, seen_only=False))

    def _say(self, sentence: str) -> None:
        """Why a key did nothing, in the bar (until the next key)."""
        self.call_after_refresh(self._show_said, sentence)

    def _show_said(self, sentence: str) -> None:
        self.said = sentence
        self._bar()

    def action_failures(self) -> None:
        f = self.filters
        self._filter(replace(f, failures_only=not f.failures_only, seen_only=False))

    def action_seen(self) -> None:
        """Only what kvtop saw (alerts, sources, GPUs, restarts), in the events list."""
        if self.mode != EVENTS:
            self.action_mode(EVENTS)
        self._filter(Filters(seen_only=not self.filters.seen_only))

    def view_text(self) -> str:
        return "\n".join(line.text for line in self.lines) + "\n"

    def action_save(self) -> None:
        """The lines shown to a new file (the app writes it: tui/kvtop/live/view_file.py)."""
        path, sentence = self._save(self.mode, self.view_text())
        if path is None:
            self.notify(sentence, severity="error", timeout=15)
            return
        self.saved_to = path
        self.notify(sentence, timeout=15)
        self._bar()

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.view_text())
        self.notify(
            f"Copied {len(self.lines)} lines to the clipboard (OSC 52). If nothing arrives, "
            "the terminal does not allow it: s saves to a file."
        )
