"""SGLang's KV sizing with the live numbers, step by step, and the what-if / reverse questions."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from kvtop import fmt
from kvtop.live.screens.base import RequestLength, ShowsState
from kvtop.live.view_state import ViewState
from kvtop.model.analysis import Analysis
from kvtop.model.derived_marks import footnote, marked
from kvtop.model.sizing import tuning
from kvtop.model.sizing.replay import (
    OTHER_AFTER_POOL,
    OTHER_AFTER_POOL_WORDS,
    SizingExplanation,
    Step,
    reserve_table,
)

WIDE_STEPS = 100  # below this width a step's arithmetic goes under its label and result


class Steps:
    """The formula's steps: a three-column table when there is room, else each step as its
    label and result on one line with the arithmetic indented below (80 columns stay legible)."""

    def __init__(self, explanation: SizingExplanation) -> None:
        self.steps = explanation.steps

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width >= WIDE_STEPS:
            table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
            table.expand = True
            table.add_column("step", no_wrap=True)
            table.add_column("arithmetic", ratio=1)
            table.add_column("result", justify="right", no_wrap=True)
            for step in self.steps:
                table.add_row(step.label, Text(step.arithmetic), _result(step))
            yield table
            return
        for step in self.steps:
            result = _result(step)
            if cell_len(step.label) + 1 + cell_len(result) > options.max_width:
                # No room for both on one line: the result under its label, never cut.
                yield Text(step.label, style="bold")
                yield Padding(Text(result, overflow="fold"), (0, 0, 0, 2))
            else:
                head = Table.grid(expand=True)
                head.add_column(ratio=1)
                head.add_column(justify="right", no_wrap=True)
                head.add_row(Text(step.label, style="bold"), result)
                yield head
            yield Padding(Text(step.arithmetic), (0, 0, 0, 2))


def _result(step: Step) -> str:
    """A step's result, marked where the log did not give it (the footnote says how)."""
    return marked(step.result, step.derived is not None)


def explanation_text(analysis: Analysis, rank: str | None) -> Group | Text:
    """The static part of the modal: the formula, this rank's numbers, the reserve, the rule."""
    e = analysis.explanation
    if e is None:
        return Text(
            "The formula needs the startup lines up to the KV cache ('Load weight end' and "
            "'KV Cache is allocated') of at least one rank; they have not been logged yet. "
            "It fills in as the server starts."
        )
    parts: list[RenderableType] = []
    # The selected GPU's rank, named in the headings (the model picks the rows and the title).
    selected = next((r for r in analysis.ranks if r.rank == rank), None)
    spent = reserve_table(e, selected, analysis.startup.finished)
    words = e.rank_words(spent.rank)
    title = Text(f"SGLang's KV sizing with this log's numbers · {words}", style="bold")
    parts.append(title)
    parts.append(Steps(e))
    said = footnote((s.label, s.derived) for s in e.steps if s.derived is not None)
    if said:
        parts.append(Text(said, style="dim"))
    sizing = next((s for s in analysis.sizings if s.rank == rank), None)
    if sizing is not None:
        parts.append(
            Text(
                f"\n{rank} (selected GPU) on its own: pre-load free "
                f"{sizing.pre_load_free_gib:.2f} GiB, post-load free "
                f"{sizing.post_load_free_gib:.2f} GiB, reserve {sizing.reserve_gib:.2f} GiB, rest "
                f"for KV cache {sizing.rest_gib:.2f} GiB → {sizing.predicted_tokens:,} tokens"
                + (f" ({sizing.actual_tokens:,} logged)" if sizing.actual_tokens else "")
            )
        )
    if spent.rows:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        table.add_column(spent.title, no_wrap=True)
        table.add_column("GiB", justify="right")
        derived = dict(spent.derived)
        for name, value in spent.rows:
            table.add_row(name, marked(f"{value:.2f}", name in derived))
        parts.extend([Text(""), table])
        if any(name == OTHER_AFTER_POOL for name, _ in spent.rows):
            parts.append(Text(OTHER_AFTER_POOL_WORDS, style="dim"))
        said = footnote(spent.derived)
        if said:
            parts.append(Text(said, style="dim"))
    if e.draft_rule is not None:
        parts.append(Text("\ndraft model: " + e.draft_rule.text))
    for note in e.notes:
        parts.append(Text("• " + note, style="dim"))
    return Group(*parts)


def _put(field: Input, text: str) -> None:
    """A value kvtop sets (the start value, ↑/↓): selected while the field has focus, so what
    is typed next replaces it (Textual selects only on focus, and the value came later)."""
    field.value = text
    if field.has_focus:
        field.select_all()


def _say(widget: Static, text: str | Text, warn: bool = False) -> None:
    """Answers are literal text; a warning is styled by the stylesheet (.answer.-warn)."""
    widget.update(Text(text) if isinstance(text, str) else text)
    widget.set_class(warn, "-warn")


NUDGE = "mem_fraction_static of the what-if +0.01 / −0.01"
SCROLL = "scroll the formula"


class FormulaScreen(ShowsState, ModalScreen[None]):
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "close", "close", tooltip="close the formula"),
        Binding("up", "nudge(1)", show=False, tooltip=NUDGE),
        Binding("down", "nudge(-1)", show=False, tooltip=NUDGE),
        Binding("pageup", "scroll(-1)", show=False, tooltip=SCROLL),
        Binding("pagedown", "scroll(1)", show=False, tooltip=SCROLL),
    ]

    def __init__(self, rank: str | None = None) -> None:
        super().__init__()
        self.rank = rank
        self.mfs: float | None = None
        self._analysis_shown: object = None

    def compose(self) -> ComposeResult:
        with Vertical(id="formula-box"):
            with VerticalScroll(id="formula-scroll", can_focus=False):
                yield Static(id="formula-text")
            with Horizontal(classes="ask"):
                yield Label("what if mem_fraction_static =")
                yield Input(id="mfs", placeholder="0.90")
                yield Label("  ↑/↓ ±0.01, or type a value")
            yield Static(id="what-if", classes="answer")
            with Horizontal(classes="ask"):
                yield Label("how much for")
                yield Input(id="tokens", placeholder="e.g. 300k")
                yield Label("tokens in the KV cache?")
            yield Static(id="tokens-answer", classes="answer")
            with Horizontal(classes="ask"):
                yield Label("or for")
                yield Input(id="requests", value="4")
                yield Label("concurrent requests of")
                yield Input(id="length")
                yield Label("tokens?")
            yield Static(id="requests-answer", classes="answer")
            yield Label(
                "Esc closes · Tab moves between fields · PgUp/PgDn scroll the formula",
                classes="hint",
            )

    def on_mount(self) -> None:
        self._shown_on_mount()
        self.query_one("#mfs", Input).focus()

    def _inputs(self) -> tuning.SizingInputs | None:
        snapshot = self.view_state.snapshot if self.view_state is not None else None
        if snapshot is None or snapshot.analysis.explanation is None:
            return None
        return snapshot.analysis.explanation.inputs

    def show(self, state: ViewState) -> None:
        snapshot = state.snapshot
        if snapshot is None:
            return
        analysis = snapshot.analysis
        if analysis is self._analysis_shown:
            return
        self._analysis_shown = analysis
        self.query_one("#formula-text", Static).update(explanation_text(analysis, self.rank))
        inputs = self._inputs()
        if inputs is not None:
            if self.mfs is None:
                self.mfs = tuning.clamp_mfs(inputs.mem_fraction_static + 0.02)
                _put(self.query_one("#mfs", Input), f"{self.mfs:.2f}")
            length = self.query_one("#length", Input)
            if not length.value:
                _put(length, str(inputs.context_len or state.request_len or 32768))
        self._answer_all()

    # -- questions ------------------------------------------------------------------------------
    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll(self, pages: int) -> None:
        scroll = self.query_one("#formula-scroll", VerticalScroll)
        if pages > 0:
            scroll.scroll_page_down(animate=False)
        else:
            scroll.scroll_page_up(animate=False)

    def action_nudge(self, steps: int) -> None:
        inputs = self._inputs()
        if inputs is None:
            return
        base = self.mfs if self.mfs is not None else inputs.mem_fraction_static
        self.mfs = tuning.clamp_mfs(base + steps * tuning.MFS_STEP)
        _put(self.query_one("#mfs", Input), f"{self.mfs:.2f}")
        self._answer_what_if()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "mfs":
            try:
                self.mfs = tuning.parse_mfs(event.value) if event.value.strip() else None
            except ValueError as exc:
                _say(self.query_one("#what-if", Static), str(exc), warn=True)
                return
            self._answer_what_if()
        else:
            self._answer_reverse()

    def _answer_all(self) -> None:
        self._answer_what_if()
        self._answer_reverse()

    def _answer_what_if(self) -> None:
        out = self.query_one("#what-if", Static)
        inputs = self._inputs()
        if inputs is None:
            out.update(
                Text("what-if needs the logged KV cache size and the cell size: not known yet.")
            )
            return
        if self.mfs is None:
            out.update(Text("type a mem_fraction_static such as 0.90"))
            return
        view = tuning.what_if_at(inputs, self.mfs)
        w = view.result
        text = Text()
        if not view.starts:
            _say(out, view.warning or "", warn=True)
            return
        change = f"{w.delta_tokens:+,} tokens".replace("-", "−")
        if w.delta_pct is not None:
            change += f" ({fmt.change_pct(w.delta_pct)})"
        text.append(
            f"{tuning.mfs_text(self.mfs)} → {w.tokens:,} tokens ({change}), "
            f"KV cache {w.kv_pool_gib:.2f} GiB"
        )
        text.append(f", reserve {w.reserve_gib:.2f} GiB")
        if w.requests_at_context is not None and inputs.context_len:
            text.append(
                f"\n  fits {fmt.ratio(w.requests_at_context)} requests of context_len "
                f"{inputs.context_len:,} tokens"
            )
        if w.headroom_after_graphs_gib is not None:
            text.append(f" · free after startup {w.headroom_after_graphs_gib:.2f} GiB")
        if view.current:
            text.append("  (the current value)", style="dim")
        if view.warning:
            text.append("\n  ⚠ " + view.warning)
        _say(out, text, warn=view.warning is not None)

    def _answer_reverse(self) -> None:
        inputs = self._inputs()
        tokens_out = self.query_one("#tokens-answer", Static)
        requests_out = self.query_one("#requests-answer", Static)
        if inputs is None:
            tokens_out.update("")
            requests_out.update("")
            return
        raw = self.query_one("#tokens", Input).value
        if raw.strip():
            try:
                answer = tuning.mfs_for_tokens(inputs, tuning.parse_count(raw))
                _say(
                    tokens_out,
                    f"  {answer.question}: {answer.sentence}",
                    answer.mem_fraction_static is None,
                )
            except ValueError as exc:
                _say(tokens_out, f"  {exc}", warn=True)
        else:
            tokens_out.update("")
        try:
            count = tuning.parse_count(self.query_one("#requests", Input).value, "requests")
            length = tuning.parse_count(self.query_one("#length", Input).value, "tokens")
        except ValueError as exc:
            _say(requests_out, f"  {exc}", warn=True)
            return
        answer = tuning.mfs_for_requests(inputs, count, length)
        self.post_message(RequestLength(length))
        _say(
            requests_out,
            f"  {answer.question}: {answer.sentence}",
            answer.mem_fraction_static is None,
        )
