"""Which limit holds requests back now, from real log lines: SGLang's own texts that lower
max_running_requests, the real Kimi-K2.5 log (max_running_requests 48 after the speculative
reset, a 159,277-token pool, context_len 262,144, max_prefill_tokens 16,384, chunks of 8,192)
and decode lines in SGLang 0.5.8's text; each limit named in its case, none when nothing waits."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import datetime

import pytest
from rich.console import Console

from kvtop.model.analysis import analyse
from kvtop.model.binding_limit import (
    CONTEXT_OVER_POOL,
    KV_POOL,
    MAX_RUNNING_REQUESTS,
    PREFILL_BUDGET,
    BindingLimit,
    binding_limit,
)
from kvtop.model.kv_usage import kv_now
from kvtop.model.snapshot import Snapshot
from kvtop.report.json_report import snapshot_json
from kvtop.report.text import print_snapshot
from kvtop.sglang.events import MaxRunningRequestsReduced, MaxRunningRequestsReset
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.tui_support import analysis_snapshot

# SGLang's warnings as its wheels print them (kv_cache_configurator.py, 0.5.14 … 0.5.23), and as
# an operator quoted the first in sgl-project/sglang#30160 (`from requested 128 to 50`).
REDUCED = (
    "[2026-07-05 10:21:33 TP0] max_running_requests was reduced from the requested 128 to 50 "
    "(per dp worker) due to the available KV cache capacity."
)
REDUCED_QUOTED = (
    "[2026-07-05 10:21:33 TP0] max_running_requests was reduced from requested 128 to 50"
)
CAPPED_BY_MAMBA = (
    "[2026-07-05 10:21:33 TP0] max_running_requests is capped to 12 by the mamba state cache "
    "(max_mamba_cache_size=60, 5 state slots per request). To raise it: increase "
    "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
    "--mamba-ssm-dtype bfloat16."
)
RESET = (
    "[2026-02-27 09:02:05] Max running requests is reset to 48 for speculative decoding. You "
    "can override this by explicitly setting --max-running-requests."
)


@pytest.mark.parametrize(
    ("line", "requested", "value", "reason"),
    [
        (REDUCED, 128, 50, "available KV cache capacity"),
        (REDUCED_QUOTED, 128, 50, "available KV cache capacity"),
        (CAPPED_BY_MAMBA, None, 12, "mamba state cache"),
    ],
)
def test_sglangs_lines_that_lower_the_cap_are_read(
    line: str, requested: int | None, value: int, reason: str
) -> None:
    event = parse_line(line)
    assert isinstance(event, MaxRunningRequestsReduced)
    assert (event.requested, event.value, event.reason) == (requested, value, reason)


def test_the_reset_line_is_still_read() -> None:
    event = parse_line(RESET)
    assert isinstance(event, MaxRunningRequestsReset) and event.value == 48


AT = datetime(2026, 2, 27, 9, 10, 0)  # a minute after the log's last line


def decode_line(running: int, tokens: int, queued: int) -> str:
    """SGLang 0.5.8's decode line for this pool of 159,277 tokens."""
    return (
        f"[{AT:%Y-%m-%d %H:%M:%S} TP0] Decode batch, #running-req: {running}, #token: {tokens}, "
        f"token usage: {tokens / 159277:.2f}, accept len: 2.81, accept rate: 0.60, cuda graph: "
        f"True, gen throughput (token/s): 512.34, #queue-req: {queued}, "
    )


def serving(running: int, tokens: int, queued: int, *extra: str) -> Snapshot:
    """The real log with `extra` lines after its summary, then one decode line, read a second
    after it."""
    base = STORY_LOG.read_text().splitlines()
    lines = [*base, *extra, decode_line(running, tokens, queued)]
    snapshot = analysis_snapshot(analyse(fold_lines(lines), "kimi"))
    return replace(snapshot, taken_at=AT.timestamp() + 1)


def found(snapshot: Snapshot) -> BindingLimit:
    limit = binding_limit(snapshot, kv_now(snapshot))
    assert limit is not None
    return limit


def test_running_requests_at_the_cap_name_max_running_requests_and_the_reset() -> None:
    limit = found(serving(48, 60000, 7))
    assert limit.limit == MAX_RUNNING_REQUESTS
    assert "48 running of max_running_requests 48" in limit.text
    assert "SGLang set it for speculative decoding" in limit.text
    assert "7 queued" in limit.text
    assert limit.numbers["max_running_requests"] == 48
    assert limit.numbers["max_running_requests_source"] == "log summary line"


def test_a_reduction_says_from_what_and_why() -> None:
    limit = found(serving(48, 60000, 3, REDUCED.replace(" 50 ", " 48 ")))
    assert limit.limit == MAX_RUNNING_REQUESTS
    assert "SGLang reduced it from the requested 128 for the available KV cache capacity" in (
        limit.text
    )
    assert limit.numbers["max_running_requests_requested"] == 128


def test_a_pool_held_by_running_requests_names_the_kv_pool() -> None:
    limit = found(serving(30, 150000, 5))  # 94.2 % held by 30 requests of ~5,000 tokens
    assert limit.limit == KV_POOL
    assert "5 queued for room in the KV pool" in limit.text
    assert "94.2% used" in limit.text
    assert "below max_running_requests 48" in limit.text


def test_few_requests_filling_a_pool_shorter_than_the_context_name_the_context() -> None:
    limit = found(serving(1, 140000, 3))  # one request holds 88 % of the pool
    assert limit.limit == CONTEXT_OVER_POOL
    assert "context_len 262,144 is longer than the pool's 159,277 tokens" in limit.text
    assert limit.numbers["context_len"] == 262144


def test_waiting_with_room_in_the_pool_names_the_prefill_budget() -> None:
    limit = found(serving(12, 30000, 4))
    assert limit.limit == PREFILL_BUDGET
    assert "max_prefill_tokens 16,384" in limit.text
    assert "chunked_prefill_size 8,192 taken in chunks" in limit.text
    assert (limit.numbers["max_prefill_tokens"], limit.numbers["chunked_prefill_size"]) == (
        16384,
        8192,
    )


def test_nothing_waiting_is_no_limit() -> None:
    limit = found(serving(12, 48211, 0))
    assert limit.limit is None
    assert limit.text.startswith("no limit binds")


def test_the_report_and_the_json_name_the_limit() -> None:
    snapshot = serving(48, 60000, 7)
    out = io.StringIO()
    print_snapshot(snapshot, Console(file=out, width=400, highlight=False, soft_wrap=False))
    assert "binding limit: running requests at the cap: 48 running of" in out.getvalue()
    data = json.loads(json.dumps(snapshot_json(snapshot)))
    assert data["binding_limit"]["limit"] == "max_running_requests"
    assert data["binding_limit"]["numbers"]["queued_requests"] == 7
    assert data["startup"]["max_running_requests_reset"] == 48
    assert data["startup"]["max_running_requests_reduced"] is None
    assert data["kv_evictable_pct"] is None  # the batch line does not say


def test_the_startup_record_keeps_the_reduction() -> None:
    data = snapshot_json(serving(12, 30000, 0, REDUCED))
    startup = data["startup"]
    assert isinstance(startup, dict)
    assert startup["max_running_requests_reduced"] == {
        "requested": 128,
        "value": 50,
        "reason": "available KV cache capacity",
    }


def test_an_old_batch_line_names_no_limit_now() -> None:
    snapshot = replace(serving(48, 60000, 7), taken_at=AT.timestamp() + 3600)
    assert binding_limit(snapshot, kv_now(snapshot)) is None
    assert snapshot_json(snapshot)["binding_limit"] is None
