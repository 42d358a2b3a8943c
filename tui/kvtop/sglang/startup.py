"""Fold SGLang events into one startup story per rank: phases, memory, target vs draft, state."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from kvtop.sglang import events as ev
from kvtop.sglang import lifecycle
from kvtop.sglang.failure_record import rank_of, record_failure, step_now
from kvtop.sglang.failures import MAX_CAUSE_CHARS, capacity_failure, serving_batch
from kvtop.sglang.line_dates import LineDates
from kvtop.sglang.start_state import (
    DRAFT,
    FAILED,
    MAX_EARLIER_STARTS,
    MAX_GRAPHS_PER_MODEL,
    MAX_PHASES_PER_RANK,
    MAX_REJECTED,
    READY,
    STARTING,
    STOPPED,
    TARGET,
    Dsv4Pools,
    GraphCapture,
    KvPart,
    ModelMemory,
    Phase,
    RankStartup,
    RejectedValue,
    Startup,
    refresh_pools,
)
from kvtop.sglang.traceback_tracker import TracebackTracker
from kvtop.sglang.unit_lines import UnitLines
from kvtop.sglang.version_hint import narrow

# Model classes SGLang uses for draft models (EAGLE/EAGLE3, MTP/NextN, standalone drafts).
_DRAFT_TYPE_RE = re.compile(r"Eagle|MTP|NextN|Nextn|Draft|Medusa", re.IGNORECASE)


def _note_rejected(startup: Startup, event: ev.Event) -> None:
    for value in event.rejected:
        startup.rejected_count += 1
        if len(startup.rejected_values) < MAX_REJECTED:
            startup.rejected_values.append(
                RejectedValue(event.prefix.rank, event.prefix.time_text, value, event.message[:120])
            )


# How a duration no line gave was measured (the lines' own times).
LOAD_TIMES = "the time between the `Load weight begin` and `Load weight end` lines"
POOL_TIMES = "the time between the line before the pool and `Memory pool end`"


def _k_plus_v(event: ev.KvCacheAllocated) -> str | None:
    """How a KV line's GiB was computed when it logs K and V, not their total (MHA)."""
    if event.kv_gib is not None or event.k_gib is None or event.v_gib is None:
        return None
    return f"K size + V size ({event.k_gib:.2f} + {event.v_gib:.2f})"


def _seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    delta = (end - start).total_seconds()
    return delta if delta >= 0 else None


class StartupTracker:
    """Feeds events in log order; `current` is the latest startup, `restarts` counts new starts."""

    def __init__(self) -> None:
        self.current = Startup()
        self.previous: Startup | None = None
        self.lines_seen = 0
        # systemd's restart counter (`Scheduled restart job, restart counter is at N`) and the
        # unit's memory limits (`MemoryMax=64G`) when the journal's reader could tell them.
        self.restart_counter = 0
        self.unit_limits: str | None = None
        self.changes = 0  # bumped by every event: lets a live view re-analyse only on change
        # Python tracebacks and systemd's lines about the unit, folded by trackers of their own.
        self.tracebacks = TracebackTracker()
        self.unit_lines = UnitLines(self)
        # Times logged without a date get one here, in log order (line_dates.py).
        self.dates = LineDates()
        # Lines in SGLang's shape that said nothing kvtop could read: how many, the first.
        self.not_understood = 0
        self.first_not_understood: str | None = None

    # -- entry point ----------------------------------------------------------------------------
    def feed(self, event: ev.Event) -> None:
        self.changes += 1
        if event.prefix.undated:
            event = replace(event, prefix=self.dates.date(event.prefix))
        startup = self.current
        stamp = event.prefix.timestamp
        if isinstance(event, ev.ServerArgsLogged):
            if (
                startup.server_args is not None
                or startup.has_rank_lines
                or startup.state != STARTING
            ):
                startup = self.new_startup()
            startup.server_args = event.args
            startup.started_at = stamp
        elif self._begins_new_start(startup, event):
            startup = self.new_startup()
        if stamp is not None:
            if startup.first_time is None:
                startup.first_time = stamp
            startup.last_time = stamp
        startup.version = narrow(startup.version, event)
        if event.rejected:
            _note_rejected(startup, event)
        if isinstance(event, ev.Failure) and startup.stopping:
            # A child exiting because the shutdown asked it to (-15, KeyboardInterrupt, the
            # SIGQUIT that follows): not a failure of the server.
            startup.after_stop_failures += 1
            return
        self.tracebacks.note(event)
        handler = _DISPATCH.get(type(event))
        if handler is not None:
            handler(self, startup, event)

    def begin_new_start(self) -> None:
        """The supervisor started the server again (a new invocation of its systemd unit): what
        follows is a new start, whatever its first lines are."""
        startup = self.current
        if startup.first_time is not None or startup.has_rank_lines or startup.server_args:
            self.new_startup()

    # -- restarts -------------------------------------------------------------------------------
    def _begins_new_start(self, startup: Startup, event: ev.Event) -> bool:
        if not isinstance(event, ev.LoadWeightBegin | ev.InitBegin):
            return False
        rank = startup.ranks.get(event.prefix.rank)
        if startup.state != STARTING:
            # Ranks never re-init or reload after the server was ready or failed: a new start.
            return rank is not None or isinstance(event, ev.InitBegin)
        if rank is None or not isinstance(event, ev.LoadWeightBegin):
            return False
        if not rank.target.load_begun:
            return False
        if rank.draft is not None and rank.draft.load_begun:
            return True  # target and draft already loaded: a third load is a new start
        return startup.speculative is False

    def new_startup(self) -> Startup:
        old = self.current
        self.previous = old
        earlier = (*old.earlier, lifecycle.record(old))[-MAX_EARLIER_STARTS:]
        restarts = max(old.restarts + 1, self.restart_counter)
        self.current = Startup(restarts=restarts, earlier=earlier)
        return self.current

    def note_restart_counter(self, counter: int) -> None:
        """systemd's count of this unit's automatic restarts, read before the latest run: the
        start now is at least its counter-th restart."""
        self.restart_counter = max(self.restart_counter, counter)
        self.current.restarts = max(self.current.restarts, counter)

    # -- helpers --------------------------------------------------------------------------------
    @staticmethod
    def _phase(
        rank: RankStartup,
        event: ev.Event,
        name: str,
        model: str,
        derived: dict[str, str] | None = None,
        **values: float | None,
    ) -> None:
        if len(rank.phases) >= MAX_PHASES_PER_RANK:
            return
        rank.phases.append(
            Phase(
                name=name,
                model=model,
                time_text=event.prefix.time_text,
                timestamp=event.prefix.timestamp,
                message=event.message[:500],
                derived=derived or {},
                **values,
            )
        )

    # -- handlers -------------------------------------------------------------------------------
    def _on_init_begin(self, startup: Startup, event: ev.InitBegin) -> None:
        rank = rank_of(startup, event.prefix)
        which = DRAFT if rank.target.load_begun else TARGET
        self._phase(rank, event, f"init {event.step} begin", which)

    def _on_init_end(self, startup: Startup, event: ev.InitEnd) -> None:
        rank = rank_of(startup, event.prefix)
        which = DRAFT if rank.target.load_begun else TARGET
        model = rank.model(which)
        if event.mem_usage_gib is not None:
            model.init_dist_gib = event.mem_usage_gib
        self._phase(
            rank,
            event,
            f"init {event.step}",
            which,
            delta_gib=event.mem_usage_gib,
            duration_s=event.elapsed_s,
        )

    def _on_baseline(self, startup: Startup, event: ev.MemoryBaseline) -> None:
        rank = rank_of(startup, event.prefix)
        if event.mem_usage_gib is not None:
            rank.target.init_dist_gib = event.mem_usage_gib
        self._phase(rank, event, "memory baseline", TARGET, delta_gib=event.mem_usage_gib)

    def _on_load_begin(self, startup: Startup, event: ev.LoadWeightBegin) -> None:
        rank = rank_of(startup, event.prefix)
        which = DRAFT if rank.target.load_begun else TARGET
        model = rank.model(which)
        model.load_begun = True
        model.avail_before_load_gib = event.avail_gib
        model.load_began_at = event.prefix.timestamp
        self._phase(rank, event, "load weights begin", which, avail_gib=event.avail_gib)

    def _load_end_model(self, rank: RankStartup, event: ev.LoadWeightEnd) -> str:
        target, draft = rank.target, rank.draft
        if target.load_begun and not target.load_ended:
            return TARGET
        if draft is not None and draft.load_begun and not draft.load_ended:
            return DRAFT
        # An end without its begin (an excerpt): the model class is the best witness.
        if event.model_type and _DRAFT_TYPE_RE.search(event.model_type):
            return DRAFT
        return DRAFT if target.load_ended else TARGET

    def _on_load_end(self, startup: Startup, event: ev.LoadWeightEnd) -> None:
        rank = rank_of(startup, event.prefix)
        which = self._load_end_model(rank, event)
        model = rank.model(which)
        model.load_ended = True
        model.load_begun = True
        model.avail_after_load_gib = event.avail_gib
        model.weights_gib = event.mem_usage_gib
        model.model_type = event.model_type
        model.dtype = event.dtype
        model.quant = event.quant
        model.load_s = event.elapsed_s
        model.derived_how.pop("load_s", None)
        if model.load_s is None:
            model.load_s = _seconds_between(model.load_began_at, event.prefix.timestamp)
            if model.load_s is not None:
                model.derived_how["load_s"] = LOAD_TIMES
        model.pool_began_at = event.prefix.timestamp
        if which == DRAFT and rank.target.kv_tokens is None and rank.target.kv_gib is None:
            startup.phased_draft_init = True
        elif which == DRAFT:
            startup.phased_draft_init = False
        if rank.target.kv_tokens is None and rank.target.kv_gib is None:
            rank.post_load_free_gib = event.avail_gib
        self._phase(
            rank,
            event,
            "load weights",
            which,
            {"duration_s": LOAD_TIMES} if "load_s" in model.derived_how else None,
            avail_gib=event.avail_gib,
            delta_gib=event.mem_usage_gib,
            duration_s=model.load_s,
        )

    def _on_kv_dtype(self, startup: Startup, event: ev.KvCacheDtype) -> None:
        startup.kv_cache_dtype = event.dtype

    def _on_kv(self, startup: Startup, event: ev.KvCacheAllocated) -> None:
        rank = rank_of(startup, event.prefix)
        which = TARGET if rank.target.avail_after_pool_gib is None else DRAFT
        if event.post_capture:
            which = TARGET
        model = rank.model(which)
        if event.va_upper_bound:
            model.kv_va_tokens = event.tokens
            return
        if event.post_capture or event.cache_name not in model.kv_pool_names:
            if event.post_capture:
                model.kv_pool_names.clear()
                model.k_gib = model.v_gib = model.kv_gib = None
                model.kv_tokens = None
            model.kv_pool_names.append(event.cache_name)
        if model.kv_tokens is None and event.tokens is not None and event.tokens > 0:
            model.kv_tokens = event.tokens
        model.kv_dtype = event.dtype or model.kv_dtype or startup.kv_cache_dtype

        def add(old: float | None, new: float | None) -> float | None:
            if new is None or new < 0:  # a pool cannot be negative: a corrupt line, not a size
                return old
            return new if old is None else round(old + new, 6)

        model.k_gib = add(model.k_gib, event.k_gib)
        model.v_gib = add(model.v_gib, event.v_gib)
        old_kv = model.kv_gib
        model.kv_gib = add(model.kv_gib, event.total_gib)
        k_plus_v = _k_plus_v(event)
        if model.kv_gib is None or (old_kv is None and k_plus_v is None):
            model.derived_how.pop("kv_gib", None)  # none, or one line's own size (MLA)
        elif old_kv is None:
            model.derived_how["kv_gib"] = k_plus_v or ""
        elif model.kv_gib != old_kv:
            added = model.kv_gib - old_kv
            model.derived_how["kv_gib"] = f"the KV lines summed ({old_kv:.2f} + {added:.2f})"
        if event.post_capture and event.avail_gib is not None:
            model.avail_after_pool_gib = event.avail_gib
        if event.post_capture:
            model.kv_parts.clear()
        total = event.total_gib if event.total_gib is None or event.total_gib >= 0 else None
        model.kv_parts.append(
            KvPart(
                event.cache_name,
                event.tokens,
                None if total is None else round(total, 6),
                gib_derived=None if total is None else k_plus_v,
            )
        )
        refresh_pools(model)
        derived = {"delta_gib": k_plus_v} if k_plus_v and event.total_gib is not None else None
        self._phase(rank, event, "KV cache", which, derived, delta_gib=event.total_gib)

    @staticmethod
    def _pool_model(rank: RankStartup) -> ModelMemory:
        """Pool lines before the target's `Memory pool end` are the target's, later the draft's."""
        return rank.model(TARGET if rank.target.avail_after_pool_gib is None else DRAFT)

    def _on_mamba(self, startup: Startup, event: ev.MambaCacheAllocated) -> None:
        model = self._pool_model(rank_of(startup, event.prefix))
        model.mamba_gib = event.state_gib
        model.mamba_slots = event.max_mamba_cache_size
        model.mamba_intermediate_gib = event.intermediate_gib
        states = {
            "mamba_gib": ("conv state + ssm state", event.conv_state_gib, event.ssm_state_gib),
            "mamba_intermediate_gib": (
                "intermediate ssm + conv",
                event.intermediate_ssm_gib,
                event.intermediate_conv_gib,
            ),
        }
        for name, (words, first, second) in states.items():
            model.derived_how.pop(name, None)
            if first is not None and second is not None:  # one alone is its line's own size
                model.derived_how[name] = f"{words} ({first:.2f} + {second:.2f})"

    def _on_swa_pool(self, startup: Startup, event: ev.SwaPoolAllocated) -> None:
        model = self._pool_model(rank_of(startup, event.prefix))
        model.swa_pool_total_gib = event.mem_usage_gib
        model.swa_tokens_logged = event.swa_tokens
        model.full_tokens_logged = event.full_tokens
        refresh_pools(model)

    def _on_sliding(self, startup: Startup, event: ev.SlidingWindowPool) -> None:
        model = self._pool_model(rank_of(startup, event.prefix))
        model.swa_tokens_logged = event.swa_layer_tokens
        model.full_tokens_logged = event.full_layer_tokens
        refresh_pools(model)

    def _on_dsv4_sizes(self, startup: Startup, event: ev.Dsv4PoolSizes) -> None:
        model = self._pool_model(rank_of(startup, event.prefix))
        pools = model.dsv4 = model.dsv4 or Dsv4Pools()
        # A later line re-sizes them all (--max-total-tokens, after the budget's line).
        pools.full_tokens, pools.swa_tokens = event.full_tokens, event.swa_tokens
        pools.c4_tokens, pools.c128_tokens = event.c4_tokens, event.c128_tokens
        pools.c4_state_rows, pools.c128_state_rows = event.c4_state_rows, event.c128_state_rows
        refresh_pools(model)

    def _on_dsv4_memory(self, startup: Startup, event: ev.Dsv4MemoryCalculation) -> None:
        model = self._pool_model(rank_of(startup, event.prefix))
        pools = model.dsv4 = model.dsv4 or Dsv4Pools()
        pools.bytes_per_full_token = event.bytes_per_full_token
        pools.budget_gib = event.available_gib
        pools.fixed_gib = event.fixed_gib

    def _on_pool_end(self, startup: Startup, event: ev.MemoryPoolEnd) -> None:
        rank = rank_of(startup, event.prefix)
        which = TARGET if rank.target.avail_after_pool_gib is None else DRAFT
        model = rank.model(which)
        model.avail_after_pool_gib = event.avail_gib
        duration = _seconds_between(model.pool_began_at, event.prefix.timestamp)
        derived = None if duration is None else {"duration_s": POOL_TIMES}
        self._phase(
            rank,
            event,
            "memory pool",
            which,
            derived,
            avail_gib=event.avail_gib,
            duration_s=duration,
        )

    def _on_capture_begin(self, startup: Startup, event: ev.GraphCaptureBegin) -> None:
        rank = rank_of(startup, event.prefix)
        which = DRAFT if event.role == DRAFT else TARGET
        graphs = rank.model(which).graphs
        if len(graphs) >= MAX_GRAPHS_PER_MODEL:
            return
        graphs.append(
            GraphCapture(
                graph=event.graph, began_at=event.prefix.time_text, avail_before_gib=event.avail_gib
            )
        )

    def _on_capture_end(self, startup: Startup, event: ev.GraphCaptureEnd) -> None:
        rank = rank_of(startup, event.prefix)
        which = DRAFT if event.role == DRAFT else TARGET
        model = rank.model(which)
        capture = next(
            (g for g in reversed(model.graphs[-8:]) if g.graph == event.graph and not g.done), None
        )
        if capture is None and len(model.graphs) >= MAX_GRAPHS_PER_MODEL:
            return
        if capture is None:
            # No begin line (an excerpt, or a version that logs none): free before is after +
            # usage, derived, never shown as read.
            capture = GraphCapture(graph=event.graph)
            if event.avail_gib is not None and event.mem_usage_gib is not None:
                capture.avail_before_gib = round(event.avail_gib + event.mem_usage_gib, 2)
                capture.derived["avail_before_gib"] = (
                    f"free after the capture + its mem usage ({event.avail_gib:.2f} + "
                    f"{event.mem_usage_gib:.2f}); no `Capture cuda graph begin` line"
                )
            model.graphs.append(capture)
        capture.ended_at = event.prefix.time_text or "?"
        capture.avail_after_gib = event.avail_gib
        capture.mem_usage_gib = event.mem_usage_gib
        capture.elapsed_s = event.elapsed_s
        if (
            capture.mem_usage_gib is None
            and capture.avail_before_gib is not None
            and event.avail_gib is not None
        ):
            capture.mem_usage_gib = round(capture.avail_before_gib - event.avail_gib, 2)
            capture.derived["mem_usage_gib"] = (
                f"free before − free after the capture ({capture.avail_before_gib:.2f} − "
                f"{event.avail_gib:.2f}); the end line gives no mem usage"
            )
        self._phase(
            rank,
            event,
            f"{'draft ' if which == DRAFT else ''}{event.graph} graph",
            which,
            {"delta_gib": capture.derived["mem_usage_gib"]}
            if "mem_usage_gib" in capture.derived
            else None,
            avail_gib=event.avail_gib,
            delta_gib=capture.mem_usage_gib,
            duration_s=event.elapsed_s,
        )

    def _on_capture_progress(self, startup: Startup, event: ev.GraphCaptureProgress) -> None:
        # tqdm bars come from rank 0 without a prefix: credit the open capture of TP0 (or "").
        for rank in startup.sorted_ranks():
            if rank.tags.tp not in (None, 0):
                continue
            for model in (rank.draft, rank.target):
                if model is not None and model.graphs and not model.graphs[-1].done:
                    model.graphs[-1].progress_avail_gib = event.avail_gib
                    return

    def _on_summary(self, startup: Startup, event: ev.Summary) -> None:
        startup.summary = event
        rank = rank_of(startup, event.prefix)
        self._phase(rank, event, "summary", TARGET, avail_gib=event.available_gpu_mem_gib)

    def _on_host_kv(self, startup: Startup, event: ev.HostKvAllocated) -> None:
        rank = rank_of(startup, event.prefix)
        if event.gb is not None:
            rank.host_kv_gb = event.gb if rank.host_kv_gb is None else rank.host_kv_gb + event.gb
        if event.tokens is not None:
            rank.host_kv_tokens = (rank.host_kv_tokens or 0) + event.tokens
        self._phase(rank, event, "host KV cache", TARGET)

    def _on_ready(self, startup: Startup, event: ev.ServerReady) -> None:
        if startup.state != FAILED:
            startup.state = READY
            startup.ready_at = event.prefix.timestamp

    def _on_listening(self, startup: Startup, event: ev.ServerListening) -> None:
        startup.listening_url = event.url
        startup.listening_at = event.prefix.timestamp

    def begin_shutdown(self, startup: Startup, event: ev.ShutdownBegun) -> None:
        if startup.state == FAILED or startup.stopping:
            return  # a failed server's kill, or the next line of the same shutdown
        startup.state = STOPPED
        startup.stop_how = event.how
        startup.stopped_by = event.message[:500]
        startup.stopped_at = event.prefix.timestamp or startup.last_time

    def _on_shutdown_progress(self, startup: Startup, event: ev.ShutdownProgress) -> None:
        if startup.state == FAILED:
            return
        if not startup.stopping:
            if event.remaining is None:
                return  # kill_process_tree and uvicorn's last line also end a crash
            # The drain's line without its SIGTERM line (an excerpt): the shutdown began.
            self.begin_shutdown(startup, ev.ShutdownBegun(event.prefix, event.message))
        if event.remaining is not None:
            startup.drain_remaining = event.remaining
        startup.shutdown_finished = (
            startup.shutdown_finished or event.finished or (event.remaining == 0)
        )

    def _on_batch(self, startup: Startup, event: ev.BatchStats) -> None:
        startup.latest_batch[event.prefix.rank] = event
        startup.batch_lines += 1
        if (
            startup.state == STARTING
            and startup.server_args is None
            and startup.listening_url is None
            and not any(rank.phases for rank in startup.ranks.values())
            and serving_batch(event)
        ):
            # Real traffic before any startup line: the log began mid-run (rotated, --since,
            # copytruncate). It is serving; its startup is not in this log.
            startup.state = READY
            startup.mid_run = True

    def _on_retraction(self, startup: Startup, event: ev.Retraction) -> None:
        startup.retractions.add(event)

    def _on_not_understood(self, startup: Startup, event: ev.NotUnderstood) -> None:
        self.not_understood += 1
        if self.first_not_understood is None:
            self.first_not_understood = event.message
        if event.prefix.rank:
            rank_of(startup, event.prefix)

    def _on_rank_seen(self, startup: Startup, event: ev.RankSeen) -> None:
        if event.prefix.rank not in startup.ranks:
            rank_of(startup, event.prefix)

    # -- the end of a run without a traceback ---------------------------------------------------
    def end_failure(self, startup: Startup, event: ev.Event, kind: str, cause: str | None) -> None:
        phase = step_now(startup)
        failure = ev.Failure(event.prefix, event.message[:MAX_CAUSE_CHARS], kind=kind)
        record_failure(startup, replace(failure, cause=cause, phase=phase))
        self.tracebacks.close()

    def stop(self, startup: Startup, event: ev.Event, how: str) -> None:
        if startup.stopping:
            startup.shutdown_finished = True
            return
        startup.state = STOPPED
        startup.stop_how = how
        startup.stopped_by = event.message[:500]
        startup.stopped_at = event.prefix.timestamp or startup.last_time
        startup.shutdown_finished = True

    def _on_exited(self, startup: Startup, event: ev.ProcessExited) -> None:
        """`Killed`, `resource_tracker: ... leaked ...`, a container's exit status: the process
        ended. After ready (or during a shutdown) it stopped; during startup it failed in the
        step it was in, and the log does not say why."""
        if startup.state == FAILED:
            return
        if startup.stopping or startup.finished:
            self.stop(startup, event, "exited")
            return
        if startup.first_time is None and not startup.has_rank_lines and not startup.server_args:
            return  # nothing of a start before it: the end of something else
        step = step_now(startup)
        self.end_failure(
            startup, event, "exited", f"exited during {step}; the log does not say why"
        )

    def _on_reset(self, startup: Startup, event: ev.MaxRunningRequestsReset) -> None:
        startup.max_running_requests_reset = event.value

    def _on_reduced(self, startup: Startup, event: ev.MaxRunningRequestsReduced) -> None:
        startup.max_running_requests_reduced = event

    def _on_capped(self, startup: Startup, event: ev.MaxTotalTokensCapped) -> None:
        startup.max_total_tokens_capped = event
        if event.profiled_tokens is not None and event.profiled_tokens <= 0:
            # SGLang's profiled KV capacity is not positive: it refuses to start (f.1).
            self.tracebacks.on_failure(startup, capacity_failure(event))

    def _on_unbalanced(self, startup: Startup, event: ev.UnbalancedMemory) -> None:
        if len(startup.unbalanced_warnings) < 20:
            startup.unbalanced_warnings.append(event.message[:500])


def _tracebacks(
    fold: Callable[[TracebackTracker, Startup, Any], None],
) -> Callable[[StartupTracker, Startup, Any], None]:
    """A traceback's line, handed to the tracker's TracebackTracker."""
    return lambda tracker, startup, event: fold(tracker.tracebacks, startup, event)


def _unit_lines(tracker: StartupTracker, startup: Startup, event: ev.UnitEvent) -> None:
    tracker.unit_lines.fold(startup, event)


_DISPATCH: dict[type[ev.Event], Callable[[StartupTracker, Startup, Any], None]] = {
    ev.InitBegin: StartupTracker._on_init_begin,
    ev.InitEnd: StartupTracker._on_init_end,
    ev.MemoryBaseline: StartupTracker._on_baseline,
    ev.LoadWeightBegin: StartupTracker._on_load_begin,
    ev.LoadWeightEnd: StartupTracker._on_load_end,
    ev.KvCacheDtype: StartupTracker._on_kv_dtype,
    ev.KvCacheAllocated: StartupTracker._on_kv,
    ev.MambaCacheAllocated: StartupTracker._on_mamba,
    ev.SwaPoolAllocated: StartupTracker._on_swa_pool,
    ev.SlidingWindowPool: StartupTracker._on_sliding,
    ev.Dsv4PoolSizes: StartupTracker._on_dsv4_sizes,
    ev.Dsv4MemoryCalculation: StartupTracker._on_dsv4_memory,
    ev.MemoryPoolEnd: StartupTracker._on_pool_end,
    ev.GraphCaptureBegin: StartupTracker._on_capture_begin,
    ev.GraphCaptureEnd: StartupTracker._on_capture_end,
    ev.GraphCaptureProgress: StartupTracker._on_capture_progress,
    ev.Summary: StartupTracker._on_summary,
    ev.HostKvAllocated: StartupTracker._on_host_kv,
    ev.ServerReady: StartupTracker._on_ready,
    ev.ServerListening: StartupTracker._on_listening,
    ev.ShutdownBegun: StartupTracker.begin_shutdown,
    ev.ShutdownProgress: StartupTracker._on_shutdown_progress,
    ev.Failure: _tracebacks(TracebackTracker.on_failure),
    ev.TracebackStart: _tracebacks(TracebackTracker.on_traceback_start),
    ev.TracebackChained: _tracebacks(TracebackTracker.on_traceback_chained),
    ev.TracebackFrame: _tracebacks(TracebackTracker.on_traceback_frame),
    ev.ExceptionLine: _tracebacks(TracebackTracker.on_exception_line),
    ev.BatchStats: StartupTracker._on_batch,
    ev.Retraction: StartupTracker._on_retraction,
    ev.MaxRunningRequestsReset: StartupTracker._on_reset,
    ev.MaxRunningRequestsReduced: StartupTracker._on_reduced,
    ev.MaxTotalTokensCapped: StartupTracker._on_capped,
    ev.UnbalancedMemory: StartupTracker._on_unbalanced,
    ev.RankSeen: StartupTracker._on_rank_seen,
    ev.NotUnderstood: StartupTracker._on_not_understood,
    ev.ProcessExited: StartupTracker._on_exited,
    ev.UnitEvent: _unit_lines,
}
