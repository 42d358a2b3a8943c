"""What the screens show: the app's one view state, the status line's facts, the selected GPU.

No Textual here: the app owns one ViewState, changes it, and hands it to the visible screens
through `show_state` (tui/kvtop/live/screens/base.py). Screens read it and never write it; they ask the
app for a change with a message (tui/kvtop/live/screens/base.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from kvtop.model.binding_limit import BindingLimit, binding_limit
from kvtop.model.history import History, Series
from kvtop.model.kv_usage import KvUsage, kv_usage, source_text
from kvtop.model.memory.gpu_order import sorted_gpus
from kvtop.model.memory.gpu_reading import GpuStatus, gpu_library
from kvtop.model.processes.table import DEFAULT_ORDER as DEFAULT_PROCESS_ORDER
from kvtop.model.processes.table import ProcessRow, process_rows
from kvtop.model.retractions import Retractions, rate_text
from kvtop.model.snapshot import GpuView, Snapshot, SourceHealth, SourceState
from kvtop.model.status.freshness import is_fresh, stale_after_s, stale_age_s
from kvtop.model.status.levels import (
    DEFAULT_THRESHOLDS,
    Alert,
    Level,
    Thresholds,
)
from kvtop.model.status.server_status import (
    AMBIENT,
    EXTRA,
    MUST,
    ORIGIN,
    WANTED,
    HeaderItem,
    deployment_items,
    duration_text,
    header_state,
    server_status,
)
from kvtop.model.verdict import Verdict

INTERVALS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
AUTO_COMPACT_BELOW_ROWS = 34


@dataclass(frozen=True, slots=True)
class StatusFacts:
    """What the status line shows, formatted from the model."""

    left: tuple[str, ...]  # host and log source, before the state
    state: str
    state_kind: str  # "ready", "starting", "failed", "waiting"
    sources: tuple[SourceHealth, ...]
    paused: bool
    interval_s: float
    demo: bool
    facts: tuple[str, ...] = ()  # SGLang version, model, parallelism, after the state
    # The state's alert level (tui/kvtop/model/status/levels.py): not ok when the server has stopped
    # answering, its sources disagree or a GPU is lost (tui/kvtop/model/status/server_status.header_state).
    level: Level = Level.OK
    # Beside each source's marker: its age once older than three refresh intervals ("3m05s").
    source_ages: tuple[str | None, ...] = ()
    # `facts` with their short forms and priorities: what a narrow status line keeps.
    fact_items: tuple[HeaderItem, ...] = ()
    # `state` as the items it is made of (tui/kvtop/live/view_state.state_items): the state, its
    # words (`GPU 3 lost`), the worst alert named, the alert counts; none: `state` is one item.
    state_items: tuple[HeaderItem, ...] = ()
    # The GPU source's marker names the library that reads the GPUs ("NVML", "AMD SMI").
    gpu_library: str = "NVML"


@dataclass(frozen=True, slots=True)
class KvFacts:
    """What the KV panel shows: the usage, where it comes from and how old, alert levels."""

    usage: KvUsage
    series: Series
    source: str | None  # "log decode batch line 09:03:07, 4m05s old"; None: fresh metrics
    usage_level: Level = Level.OK  # KV usage against the thresholds (ok unless it is current)
    queue_level: Level = Level.OK  # requests queued without a break, against the thresholds
    queued_for_s: float | None = None
    # The KV thresholds: the usage is shown with a decimal, never as one it is not on.
    usage_edges: tuple[float, ...] = ()
    # `retracted 14 · 2.8/min over 5 min` once any request was retracted (None: none), and
    # the level of the retractions_frequent alert.
    retractions: str | None = None
    retractions_level: Level = Level.OK
    # Which limit holds requests back now (None: no current load reading).
    binding: BindingLimit | None = None


@dataclass
class ViewState:
    """What the screens show; the app owns it and is the only one to change it."""

    source_label: str
    demo: bool = False
    snapshot: Snapshot | None = None  # what is on screen (frozen while paused)
    latest: Snapshot | None = None  # what the sources delivered last
    history: History = field(default_factory=History)
    paused: bool = False
    interval_s: float = 1.0
    compact: bool | None = None  # None: decided by the terminal height
    rows: int = 0  # the terminal's height, for the automatic compact mode
    request_len: int | None = None
    host_name: str = ""
    problem: str | None = None
    # The selected GPU, by NVML index: the overview's highlighted row, the GPU in GPU detail,
    # the rank the formula opens on. None: the first GPU.
    selected_gpu: int | None = None
    status: StatusFacts | None = None  # kept current by the app at every change
    kv: KvFacts | None = None  # likewise
    # Where values turn warning / critical (tui/kvtop/model/status/levels.py; the config file sets them).
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # Kinds of advisory notes the operator dismissed (d): shown in the help view only.
    dismissed_notes: frozenset[str] = frozenset()
    # The overview's GPU order (o cycles it; tui/kvtop/model/memory/gpu_order.py): "index", "free", ...
    gpu_order: str = "index"
    # The processes view's order (o there; tui/kvtop/model/processes/table.py): GPU memory first.
    process_order: str = DEFAULT_PROCESS_ORDER
    _rows_of: tuple[Snapshot | None, tuple[ProcessRow, ...]] = field(
        default=(None, ()), repr=False, compare=False
    )

    @property
    def compact_now(self) -> bool:
        if self.compact is not None:
            return self.compact
        return self.rows < AUTO_COMPACT_BELOW_ROWS

    def selected_position(self) -> int:
        """Where the selected GPU is in the snapshot's list; a GPU that left the list leaves the
        selection on the nearest one before it (0 without GPUs)."""
        return position_of(self.shown_gpus(), self.selected_gpu)

    def shown_gpus(self) -> tuple[GpuView, ...]:
        """The snapshot's GPUs in the overview's order (the selection stays on its GPU)."""
        gpus = self.snapshot.gpus if self.snapshot is not None else ()
        return gpus if self.gpu_order == "index" else sorted_gpus(gpus, self.gpu_order)

    def process_rows(self) -> tuple[ProcessRow, ...]:
        """The snapshot's GPU processes (tui/kvtop/model/processes/table.py), made once per snapshot
        for the overview's line and the processes view."""
        snapshot = self.snapshot
        if self._rows_of[0] is not snapshot:
            self._rows_of = (snapshot, process_rows(snapshot) if snapshot is not None else ())
        return self._rows_of[1]

    def selected_view(self) -> GpuView | None:
        """The selected GPU in the snapshot on screen, if it is there."""
        gpus = self.snapshot.gpus if self.snapshot is not None else ()
        if self.selected_gpu is None:
            return gpus[0] if gpus else None
        return next((g for g in gpus if g.sample.index == self.selected_gpu), None)

    def selected_rank(self) -> str | None:
        view = self.selected_view()
        return view.ranks[0] if view is not None and view.ranks else None


def position_of(gpus: tuple[GpuView, ...], index: int | None) -> int:
    if not gpus or index is None:
        return 0
    before = 0
    for position, gpu in enumerate(gpus):
        if gpu.sample.index == index:
            return position
        if gpu.sample.index < index:
            before = position
    return before


def step_selection(state: ViewState, step: int) -> int | None:
    """The NVML index `step` GPUs away from the selected one, clamped to the list."""
    gpus = state.shown_gpus()
    if not gpus:
        return None
    position = max(0, min(len(gpus) - 1, state.selected_position() + step))
    return gpus[position].sample.index


def next_interval(current_s: float, step: int) -> float:
    """The refresh interval `step` places away on the ladder, clamped at its ends."""
    nearest = min(range(len(INTERVALS_S)), key=lambda i: abs(INTERVALS_S[i] - current_s))
    return INTERVALS_S[max(0, min(len(INTERVALS_S) - 1, nearest + step))]


def _retractions_words(found: Retractions | None) -> str | None:
    """The KV panel's short line, only once a request was retracted."""
    if found is None or found.count == 0:
        return None
    return f"retracted {found.count:,} · {rate_text(found)}"


def kv_facts(state: ViewState, clock: Callable[[], float]) -> KvFacts | None:
    """The KV panel's facts from the snapshot on screen; `clock` dates a batch line (the
    log's clock is local time, as for the uptime)."""
    snapshot = state.snapshot
    if snapshot is None:
        return None
    usage = kv_usage(snapshot, state.request_len, now=datetime.fromtimestamp(clock()))
    # The levels are the verdict's (the header's, the report's, --check's): judged once.
    verdict = snapshot.verdict
    return KvFacts(
        usage=usage,
        series=state.history.token_usage_pct(),
        source=source_text(usage, stale_after_s(state.interval_s)),
        usage_level=verdict.level_of("kv_usage"),
        queue_level=verdict.level_of("queue"),
        queued_for_s=verdict.queued_for_s if usage.current else None,
        usage_edges=(
            state.thresholds.kv_usage_warning_pct,
            state.thresholds.kv_usage_critical_pct,
        ),
        retractions=_retractions_words(snapshot.retractions),
        retractions_level=verdict.level_of("retractions_frequent"),
        binding=binding_limit(snapshot, usage),
    )


def _marked(health: SourceHealth, interval_s: float) -> SourceHealth:
    """The source as its marker shows it: an ok source whose last good reading is stale (a
    scrape hanging, a poll that does not return) is not drawn as ok."""
    if (
        health.state == SourceState.OK
        and health.age_s is not None
        and not is_fresh(health, interval_s)
    ):
        return replace(health, state=SourceState.DEGRADED)
    return health


def _lost_gpus(snapshot: Snapshot) -> tuple[int, ...]:
    return tuple(g.sample.index for g in snapshot.gpus if g.sample.status == GpuStatus.LOST)


def status_facts(state: ViewState, clock: Callable[[], float]) -> StatusFacts:
    """The status line from the snapshot on screen: host, source, version, server state."""
    snapshot = state.snapshot
    left = (state.host_name, state.source_label)
    after: list[HeaderItem] = []
    kind, text, level = "waiting", "waiting for the first readings", Level.OK
    items: tuple[HeaderItem, ...] = ()
    sources: tuple[SourceHealth, ...] = ()
    if snapshot is not None:
        startup = snapshot.analysis.startup
        # One version string for every view (tui/kvtop/model/analysis.Analysis.version_shown).
        shown = snapshot.analysis.version_shown
        version = None if shown == "unknown" else f"SGLang {shown}"
        if version is not None:
            after.append(HeaderItem(version, version, EXTRA))
        after.extend(deployment_items(startup))
        status = server_status(startup, datetime.fromtimestamp(clock()))
        sources = tuple(snapshot.sources)
        header = header_state(
            status,
            sources,
            state.interval_s,
            snapshot.verdict,
            lost_gpus=_lost_gpus(snapshot),
            gpu_count=len(snapshot.gpus),
        )
        kind, text, level = status.state, header.text, header.level
        items = state_items(text, snapshot.verdict)
        sources = tuple(_marked(s, state.interval_s) for s in sources)
    if state.problem:
        kind, text, level = "failed", "sources stopped (see the message)", Level.OK
        items = ()
    ages = tuple(stale_age_s(s, state.interval_s) for s in sources)
    # The ages are drawn only once stale (source_ages); kept in the sources they would make
    # every refresh's facts new and repaint the line for nothing.
    sources = tuple(replace(s, age_s=None) for s in sources)
    return StatusFacts(
        left=left,
        facts=tuple(item.text for item in after),
        fact_items=tuple(after),
        state=text,
        state_items=items,
        state_kind=kind,
        sources=sources,
        paused=state.paused,
        interval_s=state.interval_s,
        demo=state.demo,
        level=level,
        source_ages=tuple(None if age is None else duration_text(age) for age in ages),
        gpu_library=gpu_library(g.sample for g in snapshot.gpus) if snapshot else "NVML",
    )


# -- the state's items: the state, its words, the worst alert named, the alert counts ------------
ALERT = 1  # the worst alert's words: after the state and the facts, cut to fit before they go
# Alerts the state's own words already say (`stopped …`, `failed: …`, `sources disagree`,
# `GPU 3 lost`): named again they would say one fact twice.
SAID_BY_THE_STATE = frozenset({"server_stopped", "startup_failed", "mismatch", "gpu_lost"})
_CLOCK = re.compile(r" since (?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}")
_ASIDE = re.compile(r" ?\([^()]*\)")


def alert_words(alert: Alert) -> str:
    """An alert in a few words for the status line: its sentence without the asides in
    brackets, up to its first `:` or `;` (`GPU 2 at 88 °C`, `KV cache 96.2% full`); a
    sentence that opens with its subject alone keeps the clause after it (`TP0: 3.10 GiB free
    after startup, under the 4 GiB safe margin`)."""
    text = alert.text
    while _ASIDE.search(text):
        text = _ASIDE.sub("", text)
    clauses = [c.strip() for c in re.split(r"[:;] ", text) if c.strip()]
    if not clauses:
        return alert.subject
    if clauses[0] == alert.subject and len(clauses) > 1:
        return f"{clauses[0]}: {clauses[1]}"
    return clauses[0]


def state_items(text: str, verdict: Verdict) -> tuple[HeaderItem, ...]:
    """The state as the status line lays it out: the state (without its clock when short:
    `starting: load weights (4m02s)`), each of its words (`GPU 3 lost`, `metrics down 3m05s`),
    the worst alert's words unless the state already says them, and the alert counts (`✖1 ▲1`),
    which a narrow line keeps whole. TEXT is the model's (server_status.header_state): its items
    joined by ` · `, the counts last."""
    parts = text.split(" · ")
    counts = verdict.glyph_counts() if verdict.alerts else ""
    tail = [parts.pop()] if counts and len(parts) > 1 and parts[-1] == counts else []
    items = [HeaderItem(parts[0], _CLOCK.sub("", parts[0]), MUST)]
    items += [HeaderItem(p, p, MUST) for p in parts[1:]]
    if verdict.alerts:
        worst = verdict.alerts[0]
        said = " · ".join(parts)
        if worst.kind not in SAID_BY_THE_STATE and not re.search(
            rf"(?<!\w){re.escape(worst.subject)}(?!\w)", said
        ):
            words = alert_words(worst)
            items.append(HeaderItem(words, words, ALERT))
    items += [HeaderItem(t, t, MUST) for t in tail]
    return tuple(items)


# -- the status line's layout: what survives a narrow terminal ------------------------------------
SOURCE_NAMES = {"nvml": "NVML", "log": "log", "journal": "journal", "metrics": "metrics"}
SOURCE_SHORT = {"nvml": "NV", "log": "log", "journal": "jrnl", "metrics": "met"}
INTERVAL = 7  # the refresh interval: dropped after shortening, before the DEMO badge

Piece = tuple[str, str]  # (text, style: "" plain, "bold", "state-<kind>", "mark-<state>", ...)


@dataclass(frozen=True, slots=True)
class _Slot:
    right: bool  # drawn at the right end (badges, interval, source markers)
    priority: int
    full: tuple[Piece, ...]
    short: tuple[Piece, ...]
    role: str = ""  # "state", "alert", "fact" (a deployment fact), "" (the rest)


@dataclass(frozen=True, slots=True)
class HeaderLayout:
    """The status line laid out for a width: the first line's left and right pieces, and the
    items that did not fit (a second line when the screen has room, else the help)."""

    left: tuple[Piece, ...]
    right: tuple[Piece, ...]
    moved: tuple[str, ...]

    @property
    def second_line(self) -> str:
        return " · ".join(self.moved)


def _text_slot(
    text: str, priority: int, short: str | None = None, style: str = "", role: str = ""
) -> _Slot:
    return _Slot(False, priority, ((text, style),), ((short or text, style),), role)


def _whole_words(text: str, short: str) -> str:
    """SHORT where it is made of TEXT's own words or says it was cut (`Meta-Llama-3.…`); else
    TEXT: a word cut without a mark (`HiC` for HiCache) reads as a garbled one."""
    if short.endswith("…") or set(short.split()) <= set(text.split()):
        return short
    return text


def _state_style(facts: StatusFacts) -> str:
    kind = facts.state_kind if facts.state_kind in ("ready", "failed") else "starting"
    if facts.level in (Level.WARNING, Level.CRITICAL):
        kind = facts.level  # never green while a source is down, disagrees or a GPU is lost
    return f"state-{kind}"


def _slots(facts: StatusFacts) -> list[_Slot]:
    slots = [_text_slot("kvtop", AMBIENT, style="bold")]
    slots += [_text_slot(part, ORIGIN) for part in facts.left if part]
    style = _state_style(facts)
    states = facts.state_items or (HeaderItem(facts.state, _CLOCK.sub("", facts.state), MUST),)
    for n, item in enumerate(states):
        role = "alert" if item.priority == ALERT else "state" if n == 0 else ""
        slots.append(_text_slot(item.text, item.priority, item.short, style, role))
    items = facts.fact_items or tuple(HeaderItem(f, f, MUST) for f in facts.facts)
    for i in items:
        role = "fact" if i.priority == MUST else ""
        slots.append(_text_slot(i.text, i.priority, _whole_words(i.text, i.short), role=role))
    if facts.demo:
        slots.append(_Slot(True, WANTED, ((" DEMO ", "demo"),), (("DEMO", "demo"),)))
    if facts.paused:
        slots.append(_Slot(True, MUST, ((" PAUSED ", "paused"),), ((" PAUSED ", "paused"),)))
    interval = ((f"↻{facts.interval_s:g}s", ""),)
    slots.append(_Slot(True, INTERVAL, interval, interval))
    ages = facts.source_ages or (None,) * len(facts.sources)
    for health, age in zip(facts.sources, ages, strict=False):
        mark = (health.state.mark, f"mark-{health.state}")
        name = SOURCE_NAMES.get(health.name, health.name)
        short_name = SOURCE_SHORT.get(health.name, name)
        if health.name == "nvml" and facts.gpu_library != "NVML":
            name = facts.gpu_library
            short_name = "AMD" if facts.gpu_library == "AMD SMI" else "GPU"
        full = (mark, (name, ""), *(((f" {age}", "age"),) if age else ()))
        short = (mark, (short_name, ""))
        slots.append(_Slot(True, MUST, full, short))
    return slots


def _cells(pieces: tuple[Piece, ...]) -> int:
    return sum(len(text) for text, _ in pieces)


def _joined(
    slots: list[_Slot], shown: list[bool], short: frozenset[bool]
) -> tuple[tuple[Piece, ...], ...]:
    """The line's left and right pieces; `short` holds the sides (right: True) drawn short."""
    left: list[Piece] = [(" ", "")]
    right: list[Piece] = []
    for slot, visible in zip(slots, shown, strict=True):
        pieces = slot.short if slot.right in short else slot.full
        if not visible or not pieces:
            continue
        if slot.right:
            right += [(" ", ""), *pieces]
        else:
            left += [*((" · ", ""),) * (len(left) > 1), *pieces]
    if right:
        right.append((" ", ""))
    return tuple(left), tuple(right)


def header_layout(facts: StatusFacts, width: int) -> HeaderLayout:
    """Drop whole items by priority, not from the right, and never cut a word: host and log
    source first, then the kvtop name and shape words, then the SGLang version; then the short
    forms (a long model name, the state without its clock: `starting: load weights (4m02s)`),
    the interval, the source names short (`●NV`, `●met`), the DEMO badge; then the worst
    alert's words are cut after a whole word (`TP0: 3.10 GiB free…`) or leave; then the
    deployment's facts leave, the last first (HiCache, the speculative flag, mfs, TP, the
    model); a state too long for what is left is cut after a whole word last. The state, its
    words (`GPU 3 lost`), the alert counts and the source markers always stay; what left is on
    the second line or in the help (tests/tui/test_tui_each_fact_once.py: 80 to 200 columns)."""
    slots = _slots(facts)
    shown = [True] * len(slots)
    short: frozenset[bool] = frozenset()

    def over() -> int:
        left, right = _joined(slots, shown, short)
        return _cells(left) + _cells(right) - width

    # Drop a priority, or shorten a side: the facts (False), then the source names (True).
    for step in [ORIGIN, AMBIENT, EXTRA, False, INTERVAL, True, WANTED]:
        if over() <= 0:
            break
        if isinstance(step, bool):
            short = short | {step}
        else:
            shown = [v and s.priority != step for s, v in zip(slots, shown, strict=True)]
    moved = [_plain(s) for s, v in zip(slots, shown, strict=True) if not v]
    alert = next((n for n, s in enumerate(slots) if s.role == "alert"), None)
    facts_last_first = [n for n in reversed(range(len(slots))) if slots[n].role == "fact"]
    last_resort: list[tuple[str, int]] = []
    if alert is not None:
        last_resort += [("cut", alert), ("drop", alert)]
    last_resort += [("drop", n) for n in facts_last_first]
    last_resort += [("cut", n) for n, s in enumerate(slots) if s.role == "state"]
    for what, n in last_resort:
        excess = over()
        if excess <= 0:
            break
        if what == "drop":
            shown[n] = False
            moved.append(_plain(slots[n]))
        else:
            slots[n] = _cut_words(slots[n], excess, keep_words=2)
    left, right = _joined(slots, shown, short)
    return HeaderLayout(left, right, tuple(m for m in moved if m not in ("", "kvtop")))


def _cut_words(slot: _Slot, over: int, keep_words: int) -> _Slot:
    """The slot's words (as drawn short) cut after a whole word, `over` cells shorter where
    it can, keeping at least `keep_words` words: `starting: load weights…`."""
    text, style = slot.short[0]
    words = text.split(" ")
    for n in range(len(words) - 1, keep_words - 1, -1):
        cut = " ".join(words[:n]).rstrip(",;:·") + "…"
        if len(cut) <= len(text) - over or n == keep_words:
            piece = ((cut, style),)
            return _Slot(slot.right, slot.priority, piece, piece, slot.role)
    return slot


def _plain(slot: _Slot) -> str:
    return "".join(text for text, _ in slot.full).strip()


def header_words(facts: StatusFacts) -> str:
    """Every item of the status line, whole: the help's sources view."""
    slots = [s for s in _slots(facts) if not s.right or s.priority != MUST]
    return " · ".join(_plain(s) for s in slots if s.full)
