"""SGLang's message however the line reached the reader: a time without a date, a lost leading
bracket, a mode word before the rank tags, a prefix glued after a progress bar, a shipper's
header on every line of a traceback, a prefix kvtop cannot take apart (said, not guessed).

Lines are real unless a test says otherwise: from public logs (a repository's SGLang tutorial,
two SGLang logs with a tqdm bar left in front of a rank's line) and from real logs of a decode
server and of a 2-node PP2 run, quoted as their readers received them.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from kvtop.model.analysis import analyse
from kvtop.report.json_report import to_json
from kvtop.sglang import events as ev
from kvtop.sglang import line_dates
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.prefix import split_prefix
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS

TIME_ONLY_LOG = REAL_LOGS / "80-minicpm5-rtx4090d-time-only-prefix.log"


def _fold(lines: list[str], written_by: datetime | None = None) -> StartupTracker:
    tracker = StartupTracker()
    if written_by is not None:
        tracker.dates.written_by(written_by, line_dates.FILE_TIME)
    return fold_lines(lines, tracker)


# -- a time without a date ------------------------------------------------------------------


def test_a_time_only_log_is_read_whole() -> None:
    """The tutorial's RTX 4090 D startup: ready, one rank, every memory figure, the phases."""
    lines = TIME_ONLY_LOG.read_text().splitlines()
    tracker = _fold(lines, datetime(2026, 6, 3, 9, 0))
    startup = tracker.current
    assert startup.state == "ready"
    (rank,) = startup.ranks.values()
    model = rank.target
    assert (model.avail_after_load_gib, model.weights_gib) == (11.06, 2.16)
    assert (model.kv_tokens, model.k_gib, model.v_gib) == (251788, 2.88, 2.88)
    assert (model.avail_after_pool_gib, model.avail_before_graph_gib) == (5.18, 4.73)
    assert (model.avail_after_graph_gib, model.graph_gib, model.graph_s) == (0.76, 3.97, 47.12)
    # dated by the moment the file was last written: the day before it (22:25 > 09:00)
    assert startup.ready_at == datetime(2026, 6, 2, 22, 25, 37)
    assert rank.phases[0].timestamp == datetime(2026, 6, 2, 22, 24, 31)


def test_time_only_lines_survive_midnight() -> None:
    """The same startup's lines with their times moved across midnight (times changed by hand,
    text as logged): dates go forward, durations stay positive."""
    lines = [
        "[23:59:40] Load weight begin. avail mem=13.22 GB",
        "[23:59:58] Load weight end. elapsed=0.95 s, type=LlamaForCausalLM, avail mem=11.06 GB, mem usage=2.16 GB.",
        "[23:59:58] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 251788, K size: 2.88 GB, V size: 2.88 GB",
        "[23:59:59] Memory pool end. avail mem=5.18 GB",
        "[00:00:03] Capture cuda graph begin. This can take up to several minutes. avail mem=4.73 GB",
        "[00:00:50] Capture cuda graph end. Time elapsed: 47.12 s. mem usage=3.97 GB. avail mem=0.76 GB.",
        "[00:01:09] The server is fired up and ready to roll!",
    ]
    tracker = _fold(lines, datetime(2026, 6, 3, 0, 5))
    startup = tracker.current
    (rank,) = startup.ranks.values()
    stamps = [p.timestamp for p in rank.phases]
    assert stamps[0] == datetime(2026, 6, 2, 23, 59, 40)
    assert stamps[-1] is not None and stamps[-1].date() == datetime(2026, 6, 3).date()
    assert stamps == sorted(stamps)  # type: ignore[type-var]
    assert startup.ready_at == datetime(2026, 6, 3, 0, 1, 9)
    assert startup.first_time is not None and startup.last_time is not None
    assert (startup.last_time - startup.first_time).total_seconds() == 89
    said = tracker.dates.said
    assert said is not None and "the file's modification time" in said and "23:59:40" in said


def test_a_journal_entry_dates_its_own_line() -> None:
    dates = line_dates.LineDates()
    prefix, _ = split_prefix("[23:59:58] The server is fired up and ready to roll!")
    assert prefix.undated and prefix.timestamp is None
    dates.written_by(datetime(2026, 1, 1, 0, 0, 1), line_dates.JOURNAL)  # received after midnight
    assert dates.date(prefix).timestamp == datetime(2025, 12, 31, 23, 59, 58)
    assert "journal" in (dates.said or "")


def test_the_diffusion_runtime_prefix_gets_its_year() -> None:
    """SGLang's diffusion runtime logs `[MM-DD HH:MM:SS]`: the latest year not after the file."""
    lines = (
        REAL_LOGS / "pending" / "79-gpustack3848-diffusion-scheduler-dead-exit-9.log"
    ).read_text()
    tracker = _fold(lines.splitlines(), datetime(2026, 1, 20, 8, 0))
    startup = tracker.current
    assert startup.failure is not None
    assert startup.failure.message == (
        "Rank 0 scheduler is dead. Please check if there are relevant logs."
    )
    assert startup.last_time == datetime(2025, 12, 11, 17, 52, 52)


def test_without_any_moment_known_times_take_today() -> None:
    dates = line_dates.LineDates()
    prefix, _ = split_prefix("[10:00:00] Memory pool end. avail mem=5.18 GB")
    stamp = dates.date(prefix, now=datetime(2026, 3, 4, 12, 0)).timestamp
    assert stamp == datetime(2026, 3, 4, 10, 0)
    assert "today" in (dates.said or "")


@pytest.mark.parametrize("text", ["[25:61:61] Memory pool end. avail mem=1 GB"])
def test_an_impossible_time_is_not_dated(text: str) -> None:
    event = parse_line(text)
    tracker = StartupTracker()
    if event is not None:
        tracker.feed(event)
    assert tracker.current.first_time is None


# -- a lost bracket, a mode word, a glued progress bar ------------------------------------------


def test_a_lost_leading_bracket_still_counts_the_rank() -> None:
    event = parse_line(
        "2026-06-28 23:41:27 DP1 PP1 TP1] Scheduler hit an exception: Traceback (most recent call last):"
    )
    assert isinstance(event, ev.Failure)
    assert event.prefix.rank == "DP1 PP1 TP1"
    assert (event.prefix.dp, event.prefix.pp, event.prefix.tp) == (1, 1, 1)
    assert event.message.startswith("Scheduler hit an exception")


def test_a_mode_word_before_the_rank_tags() -> None:
    """A decode server's host KV line: the `Enum.MEMBER` word stands before the tags."""
    lines = [
        "[2025-12-02 07:04:51 DisaggregationMode.IGPUDECODE TP0] Allocating 40.00 GB host memory for hierarchical KV cache.",
        "[2025-12-02 07:04:51 DisaggregationMode.IGPUDECODE TP1] Allocating 40.00 GB host memory for hierarchical KV cache.",
    ]
    startup = _fold(lines).current
    assert sorted(startup.ranks) == ["TP0", "TP1"]
    assert [startup.ranks[r].host_kv_gb for r in ("TP0", "TP1")] == [40.0, 40.0]


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        (
            "Loading safetensors checkpoint shards:  71% Completed | 116/163 [00:02<00:02, 23.49it/s]"
            "[2026-05-08 15:30:57 PP2 TP1 EP1] lm_head.weight not found in params_dict.",
            "PP2 TP1 EP1",
        ),
        (
            "Multi-thread loading shards:  97% Completed | 62/64 [00:27<00:00,  2.35it/s]"
            "[2026-07-01 15:19:30 TP11] #all_names: 707, #hit_names: 707, #missing_exclude_scales: 0",
            "TP11",
        ),
        (
            "Capturing batches (bs=4 avail_mem=7.67 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
            "[2026-09-11 23:46:45 TP0 EP0] FlashInfer autotune: per-rank caches disagree, "
            "discarding them and tuning from scratch so all ranks agree on the tactics.",
            "TP0 EP0",
        ),
    ],
)
def test_a_rank_line_glued_after_a_progress_bar(line: str, rank: str) -> None:
    event = parse_line(line)
    assert event is not None and event.prefix.rank == rank
    assert rank in _fold([line]).current.ranks


def test_a_glued_known_line_is_read() -> None:
    line = (
        "Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:18<00:00,  2.34s/it]"
        "[2026-02-04 11:30:00 TP3] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=60.01 GB, mem usage=15.20 GB."
    )
    event = parse_line(line)
    assert isinstance(event, ev.LoadWeightEnd)
    assert (event.prefix.tp, event.avail_gib, event.mem_usage_gib) == (3, 60.01, 15.2)


# -- shippers' headers on a traceback -----------------------------------------------------------

_TRACEBACK = [
    "[2026-05-16 20:46:57 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2911, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    "RuntimeError: The size of tensor a (4) must match the size of tensor b (8) at non-singleton dimension 1",
]
_CAUSE = _TRACEBACK[-1]


@pytest.mark.parametrize(
    "header",
    [
        "1747428417892000000\t2026-05-16T20:46:57.892Z\t",  # Loki: nanoseconds, then its time
        "1747428417892\t2026-05-16T20:46:57.892Z\t",  # milliseconds
        "May 16, 2026 @ 20:46:57.892\t",  # Kibana's Discover table
        "2026-05-16T20:46:57.892123456Z stdout F ",  # CRI
    ],
)
def test_a_shipper_header_on_every_line_keeps_the_cause(header: str) -> None:
    startup = _fold([header + line for line in _TRACEBACK]).current
    assert startup.failure is not None
    assert startup.failure.cause == _CAUSE
    assert "TP0" in startup.ranks


def test_docker_desktops_time_before_the_dated_prefix() -> None:
    """Docker Desktop's log view copied: its local time, a space, then SGLang's own prefix
    (a public WSL boot of DeepSeek-R1-Distill-Qwen-7B, tests/fixtures/real-boots)."""
    lines = [
        "2025-02-04 21:21:40 [2025-02-04 05:21:40 TP0] Load weight begin. avail mem=22.76 GB",
        "2025-02-04 21:21:43 [2025-02-04 05:21:43 TP0] Load weight end. type=Qwen2ForCausalLM, "
        "dtype=torch.bfloat16, avail mem=8.37 GB",
    ]
    startup = _fold(lines).current
    rank = startup.ranks["TP0"]
    assert (rank.target.avail_before_load_gib, rank.target.avail_after_load_gib) == (22.76, 8.37)


def test_a_journal_header_without_its_time() -> None:
    event = parse_line(
        "gpu-host python3[123]: [2026-02-27 09:02:05 TP2] Memory pool end. avail mem=11.18 GB"
    )
    assert isinstance(event, ev.MemoryPoolEnd) and event.prefix.tp == 2


def test_a_byte_order_mark_and_a_coloured_prefix() -> None:
    event = parse_line("\ufeff[2026-02-27 09:05:51 TP0] Memory pool end. avail mem=11.18 GB")
    assert isinstance(event, ev.MemoryPoolEnd) and event.prefix.tp == 0
    event = parse_line(
        "\x1b[32m[2026-02-27 09:05:51 TP1]\x1b[0m Memory pool end. avail mem=11.18 GB"
    )
    assert isinstance(event, ev.MemoryPoolEnd) and event.prefix.tp == 1


# -- never eating a message's own words ---------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # a client's text quoting a prefix: the echo is the client's, whatever it says
        '[2026-01-01 10:00:00] Receive: obj=GenerateReqInput(text="[2026-01-01 10:00:00 TP3] '
        'KV Cache is allocated. #tokens: 5, KV size: 1.00 GB")',
        # a bracketed time inside a message is the message's
        "Watching the run from [2026-01-01 10:00:00 TP3] Load weight end. avail mem=1.00 GB",
        "Loading took [12:00:01] Memory pool end. avail mem=1.00 GB",
    ],
)
def test_a_bracketed_time_inside_a_message_is_not_a_prefix(line: str) -> None:
    event = parse_line(line)
    assert not isinstance(event, ev.KvCacheAllocated | ev.LoadWeightEnd | ev.MemoryPoolEnd)
    assert event is None or event.prefix.rank != "TP3"


def test_a_bracketed_word_after_the_prefix_stays_in_the_message() -> None:
    prefix, message = split_prefix(
        "[2026-01-01 10:00:00 TP0] [Gloo] Rank 0 is connected to 7 peer ranks."
    )
    assert prefix.rank == "TP0"
    assert message == "[Gloo] Rank 0 is connected to 7 peer ranks."


# -- what kvtop could not read is said ---------------------------------------------------------


def test_lines_not_understood_are_counted_and_the_first_quoted() -> None:
    lines = [
        "[12/05/2026 22:24:31] KV Cache is allocated. #tokens: 251788, KV size: 5.76 GB",
        "[2026-12-05 22:24:31 TP1] Load weight en",  # cut short
        "[2026-12-05 22:24:32 TP1] Using default MoE kernel config.",  # SGLang's, not read: fine
    ]
    tracker = _fold(lines)
    assert tracker.not_understood == 2
    assert tracker.first_not_understood == lines[0]
    assert "TP1" in tracker.current.ranks  # the rank of a line not understood still counts
    report = analyse(tracker, "log")
    said = report.not_understood_said
    assert said is not None and said.startswith("2 SGLang lines not understood (first: [12/05/2026")
    source = to_json(report)["source"]
    assert isinstance(source, dict)
    assert source["not_understood"] == {"count": 2, "first": lines[0], "said": said}


def test_a_log_read_whole_says_nothing_was_left_unread() -> None:
    tracker = _fold(TIME_ONLY_LOG.read_text().splitlines(), datetime(2026, 6, 3, 9, 0))
    assert tracker.not_understood == 0
    source = to_json(analyse(tracker, "log"))["source"]
    assert isinstance(source, dict)
    assert source["not_understood"]["count"] == 0  # type: ignore[index]
    assert source["undated_times"]["said"].startswith("times logged without a date")  # type: ignore[index]


@pytest.mark.parametrize(
    ("line", "kind", "rank", "time"),
    [
        (
            "sglang-1  | 2026-01-05T10:00:00.123Z Loading safetensors checkpoint shards:  71% "
            "Completed | 116/163 [00:02<00:02, 23.49it/s][2026-05-08 15:30:57 PP2 TP1 EP1] "
            "lm_head.weight not found in params_dict.",
            ev.RankSeen,
            "PP2 TP1 EP1",
            "2026-05-08 15:30:57",
        ),
        (
            "1747428417892000000\t2026-05-16T20:46:57.892Z\t[22:24:31] KV Cache is allocated. "
            "dtype: torch.bfloat16, #tokens: 251788, K size: 2.88 GB, V size: 2.88 GB",
            ev.KvCacheAllocated,
            "",
            "22:24:31",
        ),
        (
            "Dec 01 10:00:00 host python3[1234]: 2026-06-28 23:41:27 DP1 PP1 TP1] Scheduler hit "
            "an exception: Traceback (most recent call last):",
            ev.Failure,
            "DP1 PP1 TP1",
            "2026-06-28 23:41:27",
        ),
        (
            "May 16, 2026 @ 20:46:57.892\t[2025-12-02 07:04:51 DisaggregationMode.DECODE TP1] "
            "Allocating 40.00 GB host memory for hierarchical KV cache.",
            ev.HostKvAllocated,
            "TP1",
            "2025-12-02 07:04:51",
        ),
        (
            "[pod/sglang-0/sglang] [12-11 17:52:52] Rank 0 scheduler is dead. Please check if "
            "there are relevant logs.",
            ev.Failure,
            "",
            "12-11 17:52:52",
        ),
    ],
)
def test_nested_wrappings(line: str, kind: type[ev.Event], rank: str, time: str) -> None:
    """A shipper's header around a prefix in one of the other forms: both are taken apart."""
    event = parse_line(line)
    assert isinstance(event, kind)
    assert (event.prefix.rank, event.prefix.time_text) == (rank, time)


@pytest.mark.parametrize(
    "head",
    [
        "(WorkerDict pid=559716) ",  # an RL trainer's rollout worker under Ray
        "\x1b[36m(WorkerDict pid=616, ip=192.168.149.159)\x1b[0m ",  # Ray colours its column
        "(SGLangEngine pid=89186) (Scheduler pid=89709) ",  # an actor running another
        "(pid=4242) ",  # a Ray task
    ],
)
def test_rays_actor_column(head: str) -> None:
    """SGLang run inside Ray (verl, OpenRLHF and the like): the worker's column on every line."""
    event = parse_line(head + "[2025-03-01 10:00:00 TP0] Load weight begin. avail mem=78.12 GB")
    assert isinstance(event, ev.LoadWeightBegin)
    assert (event.prefix.tp, event.avail_gib) == (0, 78.12)
    startup = _fold([head + line for line in _TRACEBACK]).current
    assert startup.failure is not None and startup.failure.cause == _CAUSE


def test_a_lost_bracket_before_a_bare_time_needs_a_rank_tag() -> None:
    """Without its date the time alone is too common in messages: only a rank tag after it
    makes it a prefix."""
    event = parse_line(
        "22:24:31 TP1] Scheduler hit an exception: Traceback (most recent call last):"
    )
    assert isinstance(event, ev.Failure)
    assert (event.prefix.rank, event.prefix.undated) == ("TP1", True)
    assert parse_line("12:00:00] Memory pool end. avail mem=1.00 GB") is None
