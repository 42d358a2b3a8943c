"""The deployment's shape (nodes, node rank, PD role, the ranks this node logs).

Real excerpts (tests/fixtures/sglang-logs/60-62, sources in their sidecars): node 1 of a two-node
DP-attention PD server (60), node 0 of a two-node TP16 server (61), node 0 of a two-node
TP8×PP2 server (62). None of them carries its `server_args=` line, so each test puts in front
the one line SGLang logs at start: the real 0.5.8 `server_args=ServerArgs(...)` line of the
story log with the deployment's values (the commands in the same threads) put in its place.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.live.view_state import ViewState, status_facts
from kvtop.model.analysis import analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.deployment_shape import deployment_shape
from kvtop.model.memory.gpu_reading import GpuSample, NvmlReading
from kvtop.model.status.server_status import deployment_items
from kvtop.report.json_report import snapshot_json, to_json
from kvtop.report.text import print_snapshot
from kvtop.sglang.events import NO_PREFIX
from kvtop.sglang.prefix import split_prefix
from kvtop.sglang.server_args import parse_server_args, server_args_from_mapping
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS, STORY_LOG
from tests.support.tui_support import analysis_snapshot

NODE1_DP_ATTENTION = REAL_LOGS / "60-issue6017-1p1d-two-node-dp-attention-node1.log"
NODE0_TP16 = REAL_LOGS / "61-issue4978-tp16-two-node-node0.log"
NODE0_TP8_PP2 = REAL_LOGS / "62-issue10046-tp8-pp2-two-node-node0.log"


def _story_args_line() -> str:
    for line in STORY_LOG.read_text(encoding="utf-8").splitlines():
        if "server_args=ServerArgs(" in line:
            return line
    raise AssertionError("the story log has no server_args line")


def args_line(**values: object) -> str:
    """The story log's real server_args line (0.5.8 format) with `values` in place of its own."""
    line = _story_args_line()
    for key, value in values.items():
        line, count = re.subn(rf"(?<=[(, ]){key}=[^,)]*", f"{key}={value!r}", line, count=1)
        assert count == 1, key
    return line


def fold(*parts: str | Path) -> StartupTracker:
    lines: list[str] = []
    for part in parts:
        text = part.read_text(encoding="utf-8") if isinstance(part, Path) else part
        lines += text.splitlines(keepends=True) if "\n" in text else [text + "\n"]
    return fold_lines(lines)


def _analysis(tracker: StartupTracker):  # type: ignore[no-untyped-def]
    return analyse(tracker, "test.log")


def deployment_facts(startup) -> list[str]:  # type: ignore[no-untyped-def]
    """The status line's deployment words, as the live view takes them."""
    return [item.text for item in deployment_items(startup)]


def render_text(analysis) -> str:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False, soft_wrap=False)
    print_snapshot(analysis_snapshot(analysis), console)
    return out.getvalue()


# --------------------------------------------------------------------------- rank prefixes


@pytest.mark.parametrize(
    ("line", "rank", "tags"),
    [
        # Real lines from users' reports: the 0.5.6+ `PP TP` and 0.5.2 `TP PP` orders.
        (
            "[2026-01-29 13:12:37 PP1 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
            "self.soft=False)",
            "PP1 TP0",
            {"pp": 1, "tp": 0},
        ),
        ("[2025-09-04 18:09:42 TP2 PP0] Scheduler hit an exception", "TP2 PP0", {"tp": 2, "pp": 0}),
        # Words before the tags (a PD role, a wrapper's name): the tags are still the rank.
        (
            "[2025-08-01 10:00:00 Prefill TP0] Load weight begin. avail mem=78.50 GB",
            "TP0",
            {"tp": 0},
        ),
        (
            "[2025-08-01 10:00:00.123 Decode DP1 TP1 EP1] KV Cache is allocated. #tokens: 10",
            "DP1 TP1 EP1",
            {"dp": 1, "tp": 1, "ep": 1},
        ),
        ("[2025-08-01 10:00:00 node-1 worker PP1 TP9] x", "PP1 TP9", {"pp": 1, "tp": 9}),
        # A tag is never taken for a word: both tags stay.
        ("[2025-08-01 10:00:00 DP0 TP0] x", "DP0 TP0", {"dp": 0, "tp": 0}),
    ],
)
def test_prefix_rank_tags_with_words_before_them(
    line: str, rank: str, tags: dict[str, int]
) -> None:
    prefix, _message = split_prefix(line)
    assert prefix.rank == rank
    for name, value in tags.items():
        assert getattr(prefix, name) == value


def test_words_without_a_rank_tag_are_not_a_prefix() -> None:
    """`[time Prefill]` is no SGLang prefix (no tag follows the word): the line stays as it is."""
    prefix, message = split_prefix(
        "[2025-08-01 10:00:00 Prefill] Load weight begin. avail mem=1 GB"
    )
    assert prefix is NO_PREFIX
    assert message.startswith("[2025-08-01 10:00:00 Prefill]")


# --------------------------------------------------------------------------- server arguments


def test_server_args_line_gives_nodes_rank_and_role() -> None:
    line = args_line(
        tp_size=16,
        nnodes=2,
        node_rank=1,
        disaggregation_mode="decode",
        dist_init_addr="10.0.0.1:5000",
    )
    args = parse_server_args(line.split("] ", 1)[1])
    assert args is not None
    assert (args.nnodes, args.node_rank, args.disaggregation_mode) == (2, 1, "decode")
    assert args.dist_init_addr == "10.0.0.1:5000" and args.tp_size == 16
    assert args.to_json()["disaggregation_mode"] == "decode"


def test_story_line_is_a_single_node_server() -> None:
    args = parse_server_args(_story_args_line().split("] ", 1)[1])
    assert args is not None
    assert (args.nnodes, args.node_rank, args.disaggregation_mode) == (1, 0, "null")
    assert args.dist_init_addr is None


def test_server_info_mapping_and_refused_values() -> None:
    """/server_info gives the same fields as a dict; an impossible role or rank is refused."""
    args = server_args_from_mapping(
        {"tp_size": 8, "pp_size": 2, "nnodes": 2, "node_rank": 0, "disaggregation_mode": "prefill"}
    )
    assert (args.nnodes, args.node_rank, args.disaggregation_mode, args.pp_size) == (
        2,
        0,
        "prefill",
        2,
    )
    bad = server_args_from_mapping({"nnodes": 0, "node_rank": -1, "disaggregation_mode": "banana"})
    assert (bad.nnodes, bad.node_rank, bad.disaggregation_mode) == (None, None, None)
    assert set(bad.rejected) == {"nnodes", "node_rank", "disaggregation_mode"}
    assert bad.rejected["disaggregation_mode"] == "'banana' (not null, prefill or decode)"


# --------------------------------------------------------------------------- the shape


def test_node1_of_a_two_node_dp_attention_decode_server() -> None:
    """Excerpt 60: TP8–15 (DP4–7) of a TP16 DP8 DP-attention server, node 1 of 2."""
    line = args_line(
        tp_size=16, dp_size=8, enable_dp_attention=True, nnodes=2, node_rank=1,
        disaggregation_mode="decode",
    )  # fmt: skip
    startup = fold(line, NODE1_DP_ATTENTION).current
    shape = deployment_shape(startup)
    assert shape.to_json() == {
        "nnodes": 2,
        "node_rank": 1,
        "disaggregation_mode": "decode",
        "ranks_expected": 8,
        "ranks_in_log": 8,
    }
    assert shape.words() == "decode node 1 of 2 · ranks TP8–15 of TP16 (the others log on node 0)"
    assert shape.flags() == []
    facts = deployment_facts(startup)
    assert facts[-1] == "decode node 1 of 2 · ranks TP8–15 of TP16 (the others log on node 0)"


def test_node0_of_a_two_node_tp16_server() -> None:
    """Excerpt 61 (node 0, `--nnodes 2 --node-rank 0 --tp 16`): TP0–7 here, TP8–15 on node 1."""
    startup = fold(args_line(tp_size=16, nnodes=2, node_rank=0), NODE0_TP16).current
    shape = deployment_shape(startup)
    # Its lines (`Custom allreduce is disabled ...`) are no startup step, but each names its
    # rank: TP1-TP4 are counted.
    assert shape.to_json() == {
        "nnodes": 2,
        "node_rank": 0,
        "disaggregation_mode": "null",
        "ranks_expected": 8,
        "ranks_in_log": 4,
    }
    sidecar = json.loads(NODE0_TP16.with_suffix(".json").read_text())
    assert shape.words() == sidecar["deployment"]["node_words"]
    assert "node 0 of 2 · ranks TP0–7 of TP16 (the others log on node 1)" in deployment_facts(
        startup
    )


def test_node0_of_a_two_node_pipeline() -> None:
    """Excerpt 62 (`--tp 8 --pp 2 --nnodes 2 --node-rank 0`): node 0 runs PP0 TP0–7."""
    startup = fold(args_line(tp_size=8, pp_size=2, nnodes=2, node_rank=0), NODE0_TP8_PP2).current
    shape = deployment_shape(startup)
    assert shape.to_json() == {
        "nnodes": 2,
        "node_rank": 0,
        "disaggregation_mode": "null",
        "ranks_expected": 8,
        "ranks_in_log": 1,
    }
    assert shape.words() == "node 0 of 2 · ranks PP0 TP0–7 of PP2×TP8 (the others log on node 1)"
    assert shape.flags() == []


@pytest.mark.parametrize(
    ("sizes", "node", "tp_range", "pp_range"),
    [
        # The placement examples of SGLang's rule (engine._calculate_rank_ranges).
        ({"tp_size": 16, "nnodes": 2}, 1, (8, 16), (0, 1)),
        ({"tp_size": 8, "pp_size": 2, "nnodes": 2}, 1, (0, 8), (1, 2)),
        ({"tp_size": 16, "pp_size": 2, "nnodes": 4}, 3, (8, 16), (1, 2)),
        ({"tp_size": 16, "pp_size": 2, "nnodes": 4}, 2, (0, 8), (1, 2)),
        (
            {"tp_size": 16, "dp_size": 16, "enable_dp_attention": True, "nnodes": 2},
            1,
            (8, 16),
            (0, 1),
        ),
    ],
)
def test_placement_rule(
    sizes: dict[str, object], node: int, tp_range: tuple[int, int], pp_range: tuple[int, int]
) -> None:
    startup = fold(args_line(node_rank=node, **sizes)).current
    shape = deployment_shape(startup)
    assert (shape.tp_range, shape.pp_range) == (tp_range, pp_range)
    assert shape.ranks_expected == (tp_range[1] - tp_range[0]) * (pp_range[1] - pp_range[0])


def test_dp_without_attention_runs_every_replica_on_the_node() -> None:
    """DP controller, single node: DP2 × TP4 = 8 schedulers, tagged `DP{n} TP{0..3}`."""
    lines = [args_line(tp_size=4, dp_size=2)] + [
        f"[2026-02-27 09:02:20 DP{dp} TP{tp}] Load weight begin. avail mem=139.02 GB"
        for dp in range(2)
        for tp in range(4)
    ]
    shape = deployment_shape(fold("\n".join(lines) + "\n").current)
    assert (shape.ranks_expected, shape.ranks_in_log) == (8, 8)
    assert shape.words() is None and shape.flags() == []


def test_single_node_says_nothing_new() -> None:
    startup = fold(STORY_LOG).current
    shape = deployment_shape(startup)
    assert shape.to_json() == {
        "nnodes": 1,
        "node_rank": 0,
        "disaggregation_mode": "null",
        "ranks_expected": 8,
        "ranks_in_log": 8,
    }
    assert shape.words() is None
    assert deployment_facts(startup) == ["Kimi-K2.5", "TP8", "mfs 0.88", "EAGLE3", "HiCache"]


def test_single_node_prefill_server_names_its_role() -> None:
    startup = fold(args_line(disaggregation_mode="prefill")).current
    assert deployment_shape(startup).words() == "prefill server"
    assert deployment_facts(startup)[-1] == "prefill server"


def test_no_server_args_no_shape() -> None:
    """Excerpt 60 alone: the sizes are unknown, so nothing is expected and nothing is flagged."""
    shape = deployment_shape(fold(NODE1_DP_ATTENTION).current)
    assert shape.to_json() == {
        "nnodes": None,
        "node_rank": None,
        "disaggregation_mode": None,
        "ranks_expected": None,
        "ranks_in_log": 8,
    }
    assert shape.words() is None and shape.flags() == []


# --------------------------------------------------------------------------- out of the world

TP9_LINE = "[2026-02-27 09:02:20 TP9] Load weight begin. avail mem=139.02 GB"


def test_rank_tag_past_the_world_size_is_flagged() -> None:
    """TP9 with tp_size 8: the header, a note and the report say so."""
    tracker = fold(STORY_LOG.read_text(encoding="utf-8") + TP9_LINE + "\n")
    startup = tracker.current
    shape = deployment_shape(startup)
    assert shape.out_of_world == ("TP9",)
    assert shape.ranks_in_log == 9 and shape.ranks_expected == 8
    assert "TP9 outside the world size" in deployment_facts(startup)
    analysis = _analysis(tracker)
    text = render_text(analysis)
    assert (
        "deployment: rank tag TP9 in the log is outside the world size (TP8 PP1 DP1): the log "
        "mixes servers, or server_args is not this server's (check --unit / --log-file)."
    ) in " ".join(text.split())
    snapshot = build_snapshot(
        SnapshotInputs(
            analysis,
            taken_at=0.0,
        )
    )
    assert any(
        n.startswith("rank tag TP9 in the log is outside the world size") for n in snapshot.notes
    )


# --------------------------------------------------------------------------- GPU placement


def _gpus(count: int) -> NvmlReading:
    samples = tuple(
        GpuSample(
            index=i,
            name="NVIDIA H20",
            uuid=f"GPU-{i}",
            pci_bus_id="",
            total_gib=95.0,
            used_gib=80.0,
            free_gib=15.0,
            reserved_gib=0.5,
            utilization_pct=None,
            memory_utilization_pct=None,
            temperature_c=None,
            power_w=None,
            power_limit_w=None,
        )
        for i in range(count)
    )
    return NvmlReading(gpus=samples, available=True, problem=None, driver_version="570.00")


def _merged_two_node_log() -> str:
    """Both nodes' output in one file (a shared log directory): TP0–15, Load weight begin in the
    0.4.x format, behind node 0's server_args and excerpt 61."""
    ranks = [
        f"[2025-04-02 05:52:10 TP{tp}] Load weight begin. avail mem=94.62 GB" for tp in range(16)
    ]
    return "\n".join([args_line(tp_size=16, nnodes=2, node_rank=0), *ranks]) + "\n"


def test_other_node_ranks_are_not_blamed_on_a_fallen_gpu() -> None:
    """8 GPUs here, TP0–15 in the log, node 0 of 2: TP8–15 run on node 1, not "no GPU here"."""
    tracker = fold(_merged_two_node_log(), NODE0_TP16)
    snapshot = build_snapshot(
        SnapshotInputs(
            _analysis(tracker),
            taken_at=0.0,
            nvml=_gpus(8),
        )
    )
    assert [g.ranks for g in snapshot.gpus] == [(f"TP{i}",) for i in range(8)]
    assert not [n for n in snapshot.notes if "no GPU here: NVML" in n or "fallen off" in n]
    assert (
        "TP8 … TP15 (8 ranks) in the log are not this node's: by SGLang's placement node 0 of 2 "
        "runs TP0–7, so they run on another node and have no GPU here (the log holds another "
        "node's output, or server_args is another node's)."
    ) in snapshot.notes
    data = snapshot_json(snapshot)
    assert data["deployment"] == {
        "nnodes": 2,
        "node_rank": 0,
        "disaggregation_mode": "null",
        "ranks_expected": 8,
        "ranks_in_log": 16,
    }


def test_own_ranks_without_a_gpu_still_get_the_fallen_gpu_note() -> None:
    """Node 0 of 2 with only 6 GPUs visible: TP6–7 are this node's ranks and have none."""
    lines = [args_line(tp_size=16, nnodes=2, node_rank=0)] + [
        f"[2025-04-02 05:52:10 TP{tp}] Load weight begin. avail mem=94.62 GB" for tp in range(8)
    ]
    snapshot = build_snapshot(
        SnapshotInputs(
            _analysis(fold("\n".join(lines) + "\n")),
            taken_at=0.0,
            nvml=_gpus(6),
        )
    )
    assert any(n.startswith("TP6, TP7 from the log have no GPU here") for n in snapshot.notes)


# --------------------------------------------------------------------------- JSON and report


def test_json_and_report_for_a_pipeline_node() -> None:
    tracker = fold(args_line(tp_size=8, pp_size=2, nnodes=2, node_rank=0), NODE0_TP8_PP2)
    analysis = _analysis(tracker)
    assert to_json(analysis)["deployment"] == {
        "nnodes": 2,
        "node_rank": 0,
        "disaggregation_mode": "null",
        "ranks_expected": 8,
        "ranks_in_log": 1,
    }
    text = " ".join(render_text(analysis).split())
    assert (
        "deployment: node 0 of 2 · ranks PP0 TP0–7 of PP2×TP8 (the others log on node 1) · "
        "1 of 8 ranks in this log"
    ) in text


def test_single_node_report_has_no_deployment_line() -> None:
    text = render_text(_analysis(fold(STORY_LOG)))
    assert "deployment:" not in text


def test_status_line_facts_carry_the_shape() -> None:
    """The header (the status line's facts) of node 1 of the two-node DP-attention server."""
    line = args_line(
        tp_size=16, dp_size=8, enable_dp_attention=True, nnodes=2, node_rank=1,
        disaggregation_mode="prefill",
    )  # fmt: skip
    snapshot = build_snapshot(
        SnapshotInputs(
            _analysis(fold(line, NODE1_DP_ATTENTION)),
            taken_at=0.0,
            nvml=_gpus(8),
        )
    )
    facts = status_facts(ViewState(source_label="x.log", snapshot=snapshot), lambda: 0.0)
    assert "prefill node 1 of 2 · ranks TP8–15 of TP16 (the others log on node 0)" in facts.facts
    assert [g.ranks for g in snapshot.gpus] == [
        (f"DP{4 + i // 2} TP{8 + i}",) for i in range(8)
    ]  # node 1's ranks on its own GPUs 0–7
    assert not [n for n in snapshot.notes if "no GPU here" in n or "not this node's" in n]
