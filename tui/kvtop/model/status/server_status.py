"""The server at a glance: its state in words, uptime, and the facts of the deployment."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kvtop.model.deployment_shape import deployment_shape
from kvtop.model.snapshot import SourceHealth
from kvtop.model.status.freshness import is_fresh, named
from kvtop.model.status.levels import Level
from kvtop.model.verdict import Verdict
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.lifecycle import crash_loop, current_step, phase_in_progress
from kvtop.sglang.start_state import FAILED, READY, STOPPED, Startup


@dataclass(frozen=True, slots=True)
class ServerStatus:
    state: str  # "starting", "ready", "failed", "stopped", or "waiting" (nothing logged yet)
    text: str  # e.g. "ready 2h14m", "starting: load weights since 09:02:11 (3m05s)"
    restarts: int
    uptime_s: float | None
    # "restarted 5× in 30 min, each failing in load weights" (lifecycle.crash_loop), else None
    restart_text: str | None = None


# A failure's kind in the words the status line and the alerts say; others: the kind with
# spaces ("out of memory", "graph capture").
_KIND_WORDS = {
    "oom_kill": "killed by the host's OOM killer (host RAM, not GPU memory)",
    "watchdog": "watchdog timeout",
}


def failure_words(kind: str | None) -> str:
    """`out of memory`, `killed by the host's OOM killer (host RAM, not GPU memory)`, `error`."""
    if not kind:
        return "error"
    return _KIND_WORDS.get(kind, kind.replace("_", " "))


def duration_text(seconds: float) -> str:
    """2h14m, 3m05s, 42s, 3d4h: the htop way of saying how long."""
    s = int(max(0, seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _progress(startup: Startup) -> str | None:
    """The phase most ranks are in, e.g. 'load weights (5/8 ranks)'."""
    latest = Counter(
        f"{r.phases[-1].name}" + (" (draft)" if r.phases[-1].model == "draft" else "")
        for r in startup.ranks.values()
        if r.phases
    )
    if not latest:
        return None
    phase, count = latest.most_common(1)[0]
    return f"{phase} ({count}/{len(startup.ranks)} ranks)"


def _clock(when: datetime | None) -> str:
    return "" if when is None else f" {when:%H:%M:%S}"


def stopped_text(startup: Startup) -> str:
    """`stopped 09:12:03 after 2h14m ready`, `stopping since 09:12:03 (3 requests to drain)`,
    `stopped 09:02:40 during startup (load weights)`."""
    at = startup.stopped_at
    if startup.drain_remaining and not startup.shutdown_finished:
        many = "request" if startup.drain_remaining == 1 else "requests"
        return f"stopping since{_clock(at)} ({startup.drain_remaining} {many} to drain)"
    text = f"stopped{_clock(at)}"
    if startup.ready_at is not None:
        if at is not None and at >= startup.ready_at:
            text += f" after {duration_text((at - startup.ready_at).total_seconds())} ready"
        return text
    if startup.batch_lines:
        return text + " while serving (its ready line is not in this log)"
    step = current_step(startup)
    return text + (f" during startup ({step.phase})" if step is not None else "")


def _starting_text(startup: Startup, now: datetime) -> str:
    """`starting: load weights since 09:02:11 (3m05s)`, with `(5/8 ranks)` while some ranks
    are further on."""
    step = phase_in_progress(startup)
    if step is None:
        progress = _progress(startup)
        return f"starting: {progress}" if progress else "starting"
    text = f"starting: {step.phase}"
    if step.since is not None:
        day = "" if step.since.date() == now.date() else f"{step.since:%Y-%m-%d} "
        text += f" since {day}{step.since:%H:%M:%S}"
        running_s = (now - step.since).total_seconds()
        if running_s >= 0:
            text += f" ({duration_text(running_s)})"
    if 0 < step.ranks_in_it < step.ranks:
        text += f" ({step.ranks_in_it}/{step.ranks} ranks)"
    return text


def server_status(startup: Startup, now: datetime) -> ServerStatus:
    """`now` in the log's clock (SGLang writes local time without a zone)."""
    restarts = startup.restarts
    loop = crash_loop(startup)
    restart_text = loop.text if loop is not None else None
    if startup.state == FAILED:
        kind = failure_words(startup.failure.kind if startup.failure else None)
        phase = startup.failure.phase if startup.failure else None
        if phase == "serving":
            text = f"crashed while serving: {kind}"
            return ServerStatus(FAILED, text, restarts, None, restart_text)
        where = f" in {phase}" if phase else ""
        return ServerStatus(FAILED, f"failed: {kind}{where}", restarts, None, restart_text)
    if startup.state == STOPPED:
        return ServerStatus(STOPPED, stopped_text(startup), restarts, None, restart_text)
    if startup.state == READY:
        since = startup.ready_at
        uptime = (now - since).total_seconds() if since is not None else None
        if uptime is not None and uptime < 0:
            uptime = None  # the log's clock is ahead of ours (another host, another zone)
        text = "ready" if uptime is None else f"ready {duration_text(uptime)}"
        return ServerStatus(READY, text, restarts, uptime, restart_text)
    if not startup.has_rank_lines and startup.server_args is None:
        return ServerStatus("waiting", "waiting for the server's log", restarts, None)
    text = _starting_text(startup, now)
    if startup.listening_url and startup.listening_at is None:
        text = "starting: listening, not ready yet"
    return ServerStatus("starting", text, restarts, None, restart_text)


# How much a header item matters: lower survives longer on a narrow status line
# (tui/kvtop/live/view_state.header_layout); the rest moves to a second line or the help's sources view.
MUST = 0  # state and uptime, model, TP/DP/EP, mfs, speculative/HiCache flags, source markers
WANTED = 3  # the DEMO badge
EXTRA = 4  # SGLang version
AMBIENT = 5  # the kvtop name, the deployment's shape words
ORIGIN = 6  # host and log source


@dataclass(frozen=True, slots=True)
class HeaderItem:
    """One item of the status line: its text, a shorter form for narrow screens, how much it
    matters (MUST .. ORIGIN)."""

    text: str
    short: str
    priority: int


MODEL_SHORT_CHARS = 14


def short_model(name: str) -> str:
    """`Meta-Llama-3.1-405B…` for a long model name (the help shows it whole)."""
    return name if len(name) <= MODEL_SHORT_CHARS else name[: MODEL_SHORT_CHARS - 1] + "…"


def deployment_items(startup: Startup) -> list[HeaderItem]:
    """Model, parallelism, mem_fraction_static, speculative and host cache, with short forms."""
    args = startup.server_args
    if args is None:
        return [HeaderItem("no server_args line: mem_fraction_static unknown", "mfs ?", MUST)]
    items: list[HeaderItem] = []
    if args.model_path:
        model = make_visible(args.model_path.rstrip("/").rsplit("/", 1)[-1])
        items.append(HeaderItem(model, short_model(model), MUST))
    for name, value in (("TP", args.tp_size), ("DP", args.dp_size), ("EP", args.ep_size)):
        if value and (value > 1 or name == "TP"):
            items.append(HeaderItem(f"{name}{value}", f"{name}{value}", MUST))
    if args.mem_fraction_static is not None:
        mfs = f"mfs {args.mem_fraction_static:g}"
        items.append(HeaderItem(mfs, mfs, MUST))
    if args.speculative_algorithm:
        spec = make_visible(str(args.speculative_algorithm))
        items.append(HeaderItem(spec, spec[:8], MUST))
    if args.enable_hierarchical_cache:
        items.append(HeaderItem("HiCache", "HiC", MUST))
    items.extend(HeaderItem(words, words, AMBIENT) for words in _shape_facts(startup))
    return items


def _shape_facts(startup: Startup) -> list[str]:
    """ "prefill node 0 of 2 · ranks TP0–7 of TP16 (the others log on node 1)", and a rank tag
    past the world size; nothing for a single node that is not a PD server."""
    shape = deployment_shape(startup)
    words = shape.words()
    facts = [words] if words else []
    if shape.out_of_world:
        facts.append(f"{', '.join(shape.out_of_world)} outside the world size")
    return facts


@dataclass(frozen=True, slots=True)
class HeaderState:
    """The status line's state: the words and the verdict's level (tui/kvtop/model/verdict.py).

    The level is the verdict's, as in every other view: the state's colour and glyph are the
    worst active alert's, and the count of active alerts follows the state. Words say why a
    ready server's state may not be current (`metrics down 3m05s`, `log stale 4m10s`), sources
    that disagree and lost GPUs; they never change the level on their own.
    """

    text: str
    level: Level


def _silence(sources: Sequence[SourceHealth], interval_s: float) -> list[str]:
    """Why a ready server's state is not known to be current: "metrics down 3m05s" when
    /metrics answered and stopped; "log stale 4m10s" when nothing else says it is alive."""
    metrics, log = named(sources, "metrics"), named(sources, "log", "journal")
    if is_fresh(metrics, interval_s):
        return []
    words = []
    if metrics is not None and metrics.age_s is not None:
        words.append(f"metrics down {duration_text(metrics.age_s)}")
    if words or is_fresh(log, interval_s):
        return words
    if log is not None and log.age_s is not None:
        return [f"{log.name} stale {duration_text(log.age_s)}"]
    return ["no source answers"]


def _lost_text(lost: Sequence[int], gpu_count: int) -> str:
    if len(lost) == gpu_count and gpu_count > 1:
        return f"all {gpu_count} GPUs lost"
    if len(lost) > 3:
        return f"{len(lost)} GPUs lost"
    return ("GPU " if len(lost) == 1 else "GPUs ") + ", ".join(map(str, lost)) + " lost"


def header_state(
    status: ServerStatus,
    sources: Sequence[SourceHealth],
    interval_s: float,
    verdict: Verdict,
    *,
    lost_gpus: Sequence[int] = (),
    gpu_count: int = 0,
) -> HeaderState:
    """The state as the status line says it: `ready 2h14m`, `▲ ready 2h14m · metrics down
    3m05s · ▲1`, `▲ ready 2h14m · sources disagree · ▲2`, `✖ ready 2h14m · GPU 3 lost · ✖1`
    (the active alerts by level, as the fleet counts them)."""
    text = status.text
    if status.restart_text:
        text += f" · {status.restart_text}"
    elif status.restarts:
        text += f" · restarted {status.restarts}×"
    words: list[str] = []
    if "mismatch" in verdict.kinds():
        words.append("sources disagree")  # the red notice under it names each difference
    if lost_gpus:
        words.append(_lost_text(lost_gpus, gpu_count))
    if status.state == READY:
        words += _silence(sources, interval_s)
    if verdict.alerts:
        words.append(verdict.glyph_counts())
    level = verdict.level if verdict.level in (Level.WARNING, Level.CRITICAL) else Level.OK
    joined = " · ".join([text, *words])
    return HeaderState(f"{level.glyph} {joined}" if level.glyph else joined, level)
