"""KV tokens held while nothing runs or waits (`kv_tokens_held_idle`): the tokens a request
never gave back, told from the radix cache's evictable prefixes and streaming sessions."""

from __future__ import annotations

import json
from dataclasses import replace

from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Level, Thresholds
from kvtop.model.status.watch import Watch, judged
from kvtop.report.json_report import snapshot_json
from kvtop.sglang.metrics import parse_exposition
from tests.support.sglang_http import Deployment, build_exposition
from tests.support.still import still_snapshot

PLAIN = still_snapshot()
LABELS = (
    '{engine_type="unified",model_name="moonshotai/Kimi-K2.5",moe_ep_rank="0",pp_rank="0",'
    'tp_rank="0"}'
)


def at(
    minute: float,
    used: int,
    running: int = 0,
    queued: int = 0,
    evictable: int | None = None,
    sessions: int | None = None,
) -> Snapshot:
    """The server at MINUTE as SGLang 0.5.14's /metrics says it: USED tokens held (the pool less
    its free and evictable slots), EVICTABLE radix-cached tokens, SESSIONS' held tokens."""
    dep = Deployment(version="0.5.14", num_used_tokens=(used,), running=running, queued=queued)
    text = build_exposition(dep)
    if evictable is not None:
        text = text.replace(
            f"sglang:kv_evictable_tokens{LABELS} 0.0",
            f"sglang:kv_evictable_tokens{LABELS} {evictable}.0",
        )
    if sessions is not None:
        text += f"sglang:streaming_session_held_tokens{LABELS} {sessions}.0\n"
    metrics = parse_exposition(text)
    return replace(PLAIN, metrics=metrics, taken_at=PLAIN.taken_at + 60 * minute)


def watched(snapshots: list[Snapshot], t: Thresholds = DEFAULT_THRESHOLDS) -> list[Level]:
    watch = Watch(t)
    return [watch.look(s)[0].level_of("kv_tokens_held_idle") for s in snapshots]


def test_tokens_held_while_idle_past_the_grace_period_are_a_warning() -> None:
    idle = [at(m, 48211) for m in (0, 2, 4, 5, 12)]
    assert watched(idle) == [Level.OK] * 3 + [Level.WARNING] * 2
    watch = Watch()
    verdict = [watch.look(s)[0] for s in idle][-1]
    (alert,) = [a for a in verdict.alerts if a.kind == "kv_tokens_held_idle"]
    assert alert.subject == "KV cache"
    assert alert.text.startswith(
        "48,211 KV tokens (30.3% of the pool) held for 12m00s while no request runs or waits "
        "(none evictable): tokens not released"
    )
    assert "restart the server in a quiet moment (warning after 5m00s idle)" in alert.text
    # One look cannot know how long: --once and --check say nothing.
    assert judged(idle[-1]).verdict.level_of("kv_tokens_held_idle") == Level.OK
    # The JSON names it with the others.
    data = json.loads(json.dumps(snapshot_json(replace(idle[-1], verdict=verdict))))
    names = [a["name"] for a in data["verdict"]["alerts"]]
    assert "kv_tokens_held_idle" in names


def test_evictable_tokens_and_released_tokens_are_no_leak() -> None:
    # Finished requests' prefixes in the radix cache: evictable, not in SGLang's used count.
    cached = [at(m, 0, evictable=48211) for m in (0, 5, 12)]
    assert watched(cached) == [Level.OK] * 3
    # Some held, the rest cached: the sentence counts the held and names the cached apart.
    mixed = [at(m, 1024, evictable=47187) for m in (0, 5, 12)]
    watch = Watch()
    verdict = [watch.look(s)[0] for s in mixed][-1]
    (alert,) = [a for a in verdict.alerts if a.kind == "kv_tokens_held_idle"]
    assert alert.text.startswith("1,024 KV tokens (0.6% of the pool) held for 12m00s")
    assert "(47,187 radix-cached tokens, evictable, not counted)" in alert.text


def test_tokens_held_by_streaming_sessions_are_no_leak() -> None:
    sessions = [at(m, 48211, sessions=48211) for m in (0, 5, 12)]
    assert watched(sessions) == [Level.OK] * 3
    partly = [at(m, 48211, sessions=40000) for m in (0, 5, 12)]
    watch = Watch()
    (alert,) = [
        a for a in [watch.look(s)[0] for s in partly][-1].alerts if a.kind == "kv_tokens_held_idle"
    ]
    assert alert.text.startswith("8,211 KV tokens")
    assert "40,000 held by streaming sessions not counted" in alert.text


def test_tokens_held_while_requests_run_or_wait_are_load() -> None:
    running = [at(m, 48211, running=3) for m in (0, 5, 12)]
    assert watched(running) == [Level.OK] * 3
    waiting = [at(m, 48211, queued=2) for m in (0, 5, 12)]
    assert watched(waiting) == [Level.OK] * 3
    # A request in between starts the idle time again.
    broken = [at(0, 48211), at(3, 48211, running=1), at(5, 48211), at(9, 48211)]
    assert watched(broken) == [Level.OK] * 4


def test_the_grace_period_is_the_users_to_set() -> None:
    idle = [at(m, 48211) for m in (0, 2, 4, 5, 12)]
    assert watched(idle, Thresholds(kv_idle_grace_s=60)) == [Level.OK] + [Level.WARNING] * 4
    assert watched(idle, Thresholds(kv_idle_grace_s=3600)) == [Level.OK] * 5


def test_a_batch_line_never_shows_an_idle_server() -> None:
    # Without /metrics the KV numbers come from the log's batch lines, written only while
    # something runs: no idle time can be seen.
    from_log = [replace(PLAIN, metrics=None, taken_at=PLAIN.taken_at + 60 * m) for m in (0, 12)]
    assert watched(from_log) == [Level.OK] * 2
