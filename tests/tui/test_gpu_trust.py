"""GPUs that fail and memory that is not the server's, with real parts.

Snapshots come from the real Session: the story log, the fake libnvidia-ml (C) through the real
nvidia-ml-py in this process (fault_host.preload_fake_nvml), and real processes this test starts
(some titled `sglang::scheduler_TPn` with bash `exec -a`, some foreign) whose pids the fake
reports as GPU processes, so titles, users and command lines are read from /proc by psutil.
The real KvtopApp shows them under Pilot (only the feed is a stand-in: tui_support).
"""

from __future__ import annotations

import getpass
import re
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.export.collector import render
from kvtop.live.screens.gpu_detail import GpuDetailScreen
from kvtop.live.screens.help import HelpScreen
from kvtop.live.widgets.text_panels import NoticesPanel
from kvtop.model.memory.gpu_detail import gpu_detail
from kvtop.model.memory.gpu_memory import reconcile
from kvtop.model.mismatch import Mismatch
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.watch import judged
from kvtop.report.json_report import snapshot_json
from kvtop.report.text import render_snapshot
from kvtop.session import Options, Session
from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.fault_host import STORY_LOG
from tests.support.sglang_procs import Child, start_server, stop_server
from tests.support.tui_support import gpu_rows, gpu_table, help_text, make_app, screen_text, until

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("utc_zone"),
]

BIG, SMALL = (120, 40), (80, 24)
GIB_MIB = 1024
USED_MIB = 135_700  # what the story's ranks leave in use on an H200 (NVML agrees with the log)
TRAINER = "kvtop-test-trainer"


@pytest.fixture
def state(fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "nvml.state"
    monkeypatch.setenv(STATE_ENV, str(path))
    return path


def start(title: str) -> subprocess.Popen[bytes]:
    """A real process whose argv[0] is TITLE (bash `exec -a` keeps the pid)."""
    return subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep 60"])


@pytest.fixture
def procs() -> Iterator[dict[str, object]]:
    """Eight SGLang schedulers (TP0–7) under their main process, a foreign trainer and a plain
    `sleep` beside them."""
    main, ranks = start_server()
    others = {"trainer": start(TRAINER), "sleep": subprocess.Popen(["sleep", "60"])}
    try:
        yield {**ranks, **others, "main": main}
    finally:
        for p in others.values():
            p.kill()
            p.wait()
        stop_server(main, ranks)


def rank_procs(procs: dict[str, Child]) -> list[tuple[int, int, int | None]]:
    return [(i, procs[f"TP{i}"].pid, USED_MIB - 600) for i in range(8)]


async def collect(log: Path = STORY_LOG) -> Snapshot:
    """One `kvtop --once` round of the real Session (no metrics)."""
    session = Session(Options(log_file=str(log), metrics=False))
    try:
        return await session.collect_once()
    finally:
        await session.close()


def report(snapshot: Snapshot) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_snapshot(snapshot))
    return console.export_text()


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def rows_visible(app, height: int) -> bool:  # type: ignore[no-untyped-def]
    """Every GPU's row is on the screen: drawn (in the terminal's text) and inside it."""
    lines = screen_text(app).splitlines()[: height - 1]  # the footer is the last line
    drawn = {int(m.group(1)) for line in lines if (m := re.match(r"^\S?\s*(\d)\s+TP\d", line))}
    rows = gpu_rows(app)
    return drawn == set(range(8)) and all(r.region.bottom <= height - 1 for r in rows)


# -- lost GPUs -----------------------------------------------------------------------------------
async def test_some_gpus_lost_no_derived_numbers(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    write_state(
        state,
        eight_gpus(used_mib=USED_MIB),
        procs=rank_procs(procs),
        errors=[("nvmlDeviceGetMemoryInfo_v2", 3, 15), ("nvmlDeviceGetMemoryInfo_v2", 5, 15)],
    )
    snapshot = await collect()
    lost = [g.sample.index for g in snapshot.gpus if g.lost]
    assert lost == [3, 5]
    for gpu in snapshot.gpus:
        if gpu.lost:
            assert gpu.memory.segments() == [] and gpu.memory.runtime_gib is None
        else:
            assert gpu.memory.runtime_gib is not None and gpu.memory.runtime_gib >= 0
    # no reconciliation or placement note about the lost GPUs, and no rank "without a GPU"
    assert not [n for n in snapshot.notes if "GPU 3" in n or "GPU 5" in n or "no GPU" in n]
    nvml = next(s for s in snapshot.sources if s.name == "nvml")
    assert nvml.state == "degraded"
    assert "GPU 3, 5: lost" in nvml.detail and "the other GPUs keep updating" in nvml.detail
    data = snapshot_json(snapshot)
    g3 = data["gpus"][3]  # type: ignore[index]
    assert g3["status"] == "lost"
    assert all(v is None for v in g3["breakdown"].values())
    assert data["gpus"][0]["breakdown"]["runtime_gib"] >= 0  # type: ignore[index]
    text = report(snapshot)
    assert "−" not in re.search(r"(?m)^\s*3 .*$", text).group(0)  # type: ignore[union-attr]


async def test_memory_unreadable_shows_as_lost(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    """A memory query that fails with another error (999 Unknown): no numbers, said in words."""
    write_state(
        state,
        eight_gpus(used_mib=USED_MIB),
        procs=rank_procs(procs),
        errors=[("nvmlDeviceGetMemoryInfo_v2", 2, 999)],
    )
    snapshot = await collect()
    g2 = snapshot.gpus[2]
    assert g2.sample.status == "error" and g2.lost and not g2.memory.known
    nvml = next(s for s in snapshot.sources if s.name == "nvml")
    assert "GPU 2: unreadable through NVML (memory: Unknown Error, code 999)" in nvml.detail
    assert all(v is None for v in snapshot_json(snapshot)["gpus"][2]["breakdown"].values())  # type: ignore[index]
    app = make_app(snapshot, demo=False, label="unreadable")
    async with app.run_test(size=BIG) as pilot:
        await until(
            pilot,
            "GPU 2's row in words",
            lambda: "✖ lost: memory unreadable through NVML" in screen_text(app),
        )


async def test_all_gpus_lost_says_all(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    write_state(
        state,
        eight_gpus(used_mib=USED_MIB),
        procs=rank_procs(procs),
        errors=[("nvmlDeviceGetMemoryInfo_v2", None, 15)],
    )
    snapshot = await collect()
    assert all(g.lost for g in snapshot.gpus) and len(snapshot.gpus) == 8
    nvml = next(s for s in snapshot.sources if s.name == "nvml")
    assert "GPU 0–7: lost" in nvml.detail and "all 8 GPUs NVML sees" in nvml.detail
    assert "other GPUs keep updating" not in nvml.detail
    assert not [n for n in snapshot.notes if "itemises" in n or "no GPU here" in n]
    data = snapshot_json(snapshot)
    assert all(
        v is None
        for g in data["gpus"]  # type: ignore[union-attr]
        for v in g["breakdown"].values()
    )
    assert "other GPUs keep updating" not in report(snapshot)

    app = make_app(snapshot, demo=False, label="lost")
    async with app.run_test(size=BIG) as pilot:
        await until(
            pilot,
            "eight rows that say lost",
            lambda: screen_text(app).count("✖ lost: fell off the bus") == 8,
        )
        text = screen_text(app)
        assert "GPU 0–7: lost" in flat(text)
        assert "other GPUs keep updating" not in flat(text)
        assert not re.search(r"runtime\s*−", text)  # no negative runtime anywhere
        assert "GPU 0: lost: NVML gives no numbers" in text  # the legend
        await pilot.press("enter")
        await until(pilot, "a lost GPU's detail", lambda: isinstance(app.screen, GpuDetailScreen))
        await until(pilot, "the lost breakdown", lambda: "no number is derived" in screen_text(app))
    async with make_app(snapshot, demo=False, label="lost").run_test(size=SMALL) as pilot:
        app = pilot.app
        await until(pilot, "eight lost rows at 80x24", lambda: rows_visible(app, SMALL[1]))
        assert screen_text(app).count("✖ lost") == 8


# -- notes that never push the GPUs off the screen -----------------------------------------------
async def _crowded(state: Path, procs) -> Snapshot:  # type: ignore[no-untyped-def]
    """Many notices at once: the log itemises more than NVML sees on every GPU, ranks mapped
    by order (untitled processes), GPU 6 lost, and the metrics belong to another server."""
    untitled = [(i, procs["sleep"].pid if i == 0 else 10_000_000 + i, 1000) for i in range(8)]
    write_state(
        state,
        eight_gpus(used_mib=20_000),
        procs=untitled,
        errors=[("nvmlDeviceGetMemoryInfo_v2", 6, 15)],
    )
    snapshot = await collect()
    mismatches = (
        Mismatch("model", "Kimi-K2.5", "glm-5.3-flash", "metrics"),
        Mismatch("max_total_num_tokens", 159_277, 655_360, "metrics"),
    )
    return judged(replace(snapshot, mismatches=mismatches, notes=(*snapshot.notes, "log: rotated")))


async def test_notes_collapse_and_leave_every_gpu_row_visible(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    snapshot = await _crowded(state, procs)
    assert snapshot.rank_mapping == "order"
    # one line for the seven GPUs the log does not match (the lost GPU 6 is not among them)
    itemised = [n for n in snapshot.notes if "itemises" in n]
    assert itemised == [next(n for n in itemised if n.startswith("GPU 0–5, 7: "))]
    for size in (SMALL, BIG):
        app = make_app(snapshot, demo=False, label="crowded")
        async with app.run_test(size=size) as pilot:
            await until(pilot, f"eight GPU rows at {size}", lambda: rows_visible(app, size[1]))  # noqa: B023
            notices = app.screen.query_one(NoticesPanel)
            assert notices.region.height <= size[1] // 4
            text = flat(screen_text(app))
            assert "mismatch: metrics say glm-5.3-flash" in text
            assert "✖ lost" in text  # GPU 6's row
            if size == SMALL:  # what does not fit is counted, not cut off without a word
                assert re.search(r"\+\d more notices \(\? lists them all\)", text)
            else:
                assert "GPU 0–5, 7: the log itemises more than NVML sees" in text
            await pilot.press("question_mark")  # the help lists every notice
            await until(pilot, "help", lambda: isinstance(app.screen, HelpScreen))  # noqa: B023
            app.screen.query_one("#help-box").scroll_end(animate=False)
            await until(
                pilot,
                "the notes in help",
                lambda: "GPU 0–5, 7: the log" in flat(screen_text(app)),  # noqa: B023
            )


async def test_mismatches_come_first_in_red(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    snapshot = await _crowded(state, procs)
    app = make_app(snapshot, demo=False, label="crowded")
    async with app.run_test(size=BIG) as pilot:
        notices = app.screen.query_one(NoticesPanel)
        await until(pilot, "the notices", lambda: "mismatch:" in notices.render().plain)
        rendered = notices.render()
        assert rendered.plain.startswith(" ▲ mismatch: metrics say glm-5.3-flash")
        bad = notices.component_style("panel--bad")
        first_line = rendered.plain.index("\n")
        assert any(span.style == bad and span.start < first_line for span in rendered.spans), (
            rendered.spans
        )


async def test_advisory_note_is_dismissed_and_kept_in_help(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    write_state(
        state,
        eight_gpus(used_mib=USED_MIB),
        procs=[(i, procs["sleep"].pid if i == 0 else 10_000_000 + i, 1000) for i in range(8)],
    )
    snapshot = await collect()
    assert any("by order" in n for n in snapshot.notes)  # JSON and --once keep it
    app = make_app(snapshot, demo=False, label="advisory")
    async with app.run_test(size=BIG) as pilot:
        await until(
            pilot, "the by-order advisory", lambda: "mapped to GPUs by order" in screen_text(app)
        )
        assert "d: dismiss" in flat(screen_text(app))
        await pilot.press("d")
        await until(pilot, "the advisory gone", lambda: "by order" not in flat(screen_text(app)))
        app.feed.push(snapshot)  # a new refresh does not bring it back
        await pilot.press("question_mark")
        await until(pilot, "help", lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("end")  # the notes close the help, after every key: scroll to them
        await until(
            pilot,
            "the dismissed advisory listed in help",
            lambda: (
                "advisory, dismissed" in screen_text(app)
                and "mapped to GPUs by order" in flat(screen_text(app))
            ),
        )
        assert "dismiss the advisory note" in flat(help_text(app))  # the keys, above
        await pilot.press("escape")
        await until(pilot, "the overview", lambda: not isinstance(app.screen, HelpScreen))
        assert "by order" not in flat(screen_text(app))


# -- memory that is not the server's -------------------------------------------------------------
def _with_strangers(state: Path, procs, **extra: object) -> None:  # type: ignore[no-untyped-def]
    gpus = eight_gpus(used_mib=USED_MIB)
    gpus[3]["used_mib"] = USED_MIB + 4 * GIB_MIB  # the trainer's 4 GiB on top of the rank
    write_state(
        state,
        gpus,
        procs=[*rank_procs(procs), (3, procs["trainer"].pid, 4 * GIB_MIB)],
        **extra,  # type: ignore[arg-type]
    )


async def test_other_processes_get_their_segment_and_detail(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    _with_strangers(state, procs)
    snapshot = await collect()
    assert snapshot.rank_mapping == "process"
    g2, g3 = snapshot.gpus[2], snapshot.gpus[3]
    assert g3.memory.other_processes_gib == pytest.approx(4.0)
    assert g2.memory.other_processes_gib == 0.0
    # runtime is what it would be without the trainer: its 4 GiB are not SGLang's runtime
    tp3 = next(b for b in snapshot.analysis.breakdowns if b.rank == "TP3")
    alone = reconcile(g3.sample.total_gib, g3.sample.free_gib + 4.0, tp3)
    assert g3.memory.runtime_gib == pytest.approx(alone.runtime_gib, abs=1e-3)
    assert g3.memory.runtime_gib > 0
    assert sum(v for _, v in g3.memory.segments()) == pytest.approx(g3.sample.total_gib)
    trainer = next(p for p in g3.processes if p.pid == procs["trainer"].pid)
    assert trainer.other and trainer.user == getpass.getuser()
    assert trainer.command is not None and trainer.command.startswith(TRAINER)
    assert not next(p for p in g3.processes if p.rank == "TP3").other
    data = snapshot_json(snapshot)
    assert data["gpus"][3]["breakdown"]["other_processes_gib"] == 4.0  # type: ignore[index]
    assert data["gpus"][0]["breakdown"]["other_processes_gib"] == 0.0  # type: ignore[index]
    assert "other procs" in report(snapshot)

    app = make_app(snapshot, demo=False, label="strangers")
    async with app.run_test(size=(120, 50)) as pilot:  # GPU detail's process list in view
        await until(pilot, "the GPU rows", lambda: len(gpu_rows(app)) == 8)
        await pilot.press("j", "j", "j")
        await until(pilot, "GPU 3's legend", lambda: "▙ other procs 4.0" in screen_text(app))
        row3 = next(line for line in screen_text(app).splitlines() if "TP3" in line)
        assert "▙" in row3
        row2 = next(line for line in screen_text(app).splitlines() if "TP2" in line)
        assert "▙" not in row2
        await pilot.press("enter")
        await until(
            pilot,
            "the trainer listed in GPU 3's detail",
            lambda: str(procs["trainer"].pid) in screen_text(app),
        )
        text = screen_text(app)
        line = next(
            x for x in text.splitlines() if x.lstrip().startswith(str(procs["trainer"].pid))
        )
        assert "other process" in line and getpass.getuser() in line and TRAINER in line
        assert re.search(r"(?m)^ other processes\s+4\.00\s+NVML", text), text


async def test_other_process_started_before_the_server_is_still_anothers(
    state: Path, procs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A log dated 2030: the trainer started before the server's start, and allocated its 4 GiB
    after the rank read its free memory. Whose memory it is comes from its identity, never
    from when it started: 4 GiB of other processes, and SGLang's runtime is what it is
    without the trainer (GPU detail, the bar, the JSON and the exporter say the same)."""
    later = tmp_path / "later.log"
    later.write_text(STORY_LOG.read_text().replace("2026-02-27", "2030-02-27"))
    _with_strangers(state, procs)
    snapshot = await collect(later)
    g3 = snapshot.gpus[3]
    assert next(p for p in g3.processes if p.pid == procs["trainer"].pid).other
    assert g3.memory.other_processes_gib == pytest.approx(4.0)
    tp3 = next(b for b in snapshot.analysis.breakdowns if b.rank == "TP3")
    alone = reconcile(g3.sample.total_gib, g3.sample.free_gib + 4.0, tp3)
    assert g3.memory.runtime_gib == pytest.approx(alone.runtime_gib, abs=1e-3)
    detail = gpu_detail(snapshot, 3)
    assert detail is not None
    rows = {row.item: row.gib for row in detail.breakdown}
    assert rows["other processes"] == pytest.approx(4.0)
    data = snapshot_json(snapshot)
    assert data["gpus"][3]["breakdown"]["other_processes_gib"] == 4.0  # type: ignore[index]
    exported = {
        s.labels["segment"]: s.value
        for family in render(snapshot, "h")
        for s in family.samples
        if s.name == "kvtop_gpu_memory_bytes" and s.labels["gpu"] == "3"
    }
    assert exported["other_processes"] == pytest.approx(4.0 * 2**30, rel=1e-3)
    names = [name for name, _ in g3.memory.segments()]
    assert names.index("other processes") > names.index("runtime")  # after the server's


async def test_unknown_process_memory_is_null(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    gpus = eight_gpus(used_mib=USED_MIB)
    write_state(state, gpus, procs=[*rank_procs(procs), (3, procs["trainer"].pid, None)])
    snapshot = await collect()
    assert snapshot.gpus[3].memory.other_processes_gib is None
    data = snapshot_json(snapshot)
    assert data["gpus"][3]["breakdown"]["other_processes_gib"] is None  # type: ignore[index]
    assert data["gpus"][2]["breakdown"]["other_processes_gib"] == 0.0  # type: ignore[index]


async def test_by_order_the_largest_process_is_the_ranks(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    """No SGLang title anywhere: GPU 2 has the rank's big process and a small stranger."""
    big = procs["trainer"].pid  # titles do not name ranks here: by order
    small = procs["sleep"].pid
    untitled = [(i, 10_000_000 + i, USED_MIB - 600) for i in range(8) if i != 2]
    write_state(
        state,
        eight_gpus(used_mib=USED_MIB),
        procs=[*untitled, (2, big, USED_MIB - 2000), (2, small, 1400)],
    )
    snapshot = await collect()
    assert snapshot.rank_mapping == "order"
    g2 = snapshot.gpus[2]
    assert [p.pid for p in g2.processes if p.other] == [small]
    assert g2.memory.other_processes_gib == pytest.approx(1400 / 1024, abs=1e-3)


# -- alert colours --------------------------------------------------------------------------------
async def test_gpu_rows_show_alert_levels(state: Path, procs) -> None:  # type: ignore[no-untyped-def]
    gpus = eight_gpus(used_mib=USED_MIB)
    gpus[1]["temp"] = 94  # critical (90)
    gpus[2]["power_mw"] = 599_000  # 599 W of 700: 86 %, fine
    gpus[4].update(power_mw=700_000, throttle=0x4)  # at its power limit: normal under load
    gpus[5]["temp"] = 85  # warning (83)
    gpus[6]["throttle"] = 0x40  # clocks lowered for heat (HW thermal slowdown): warning
    write_state(
        state, gpus, procs=rank_procs(procs), errors=[("nvmlDeviceGetMemoryInfo_v2", 7, 15)]
    )
    snapshot = await collect()
    app = make_app(snapshot, demo=False, label="alerts")
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the GPU rows", lambda: len(gpu_rows(app)) == 8)
        rows = {r.index: r for r in gpu_rows(app)}
        await until(
            pilot,
            "row alerts",
            lambda: all(r.alert is not None or r.view.lost for r in rows.values()),
        )  # type: ignore[union-attr]
        lines = {
            int(m.group(1)): line
            for line in screen_text(app).splitlines()
            if (m := re.match(r"^\S?\s*(\d)\s+(TP|—)", line))
        }
        assert lines[1].rstrip().endswith("✖")
        assert lines[5].rstrip().endswith("▲") and lines[6].rstrip().endswith("▲")
        assert lines[7].rstrip().endswith("✖") and "lost" in lines[7]
        assert "700W" in lines[4]
        for i in (0, 2, 3, 4):
            assert lines[i].rstrip()[-1] not in "▲✖", lines[i]
        critical = gpu_table(app).component_style("gpu--critical")
        warning = gpu_table(app).component_style("gpu--warning")
        assert critical != warning and critical.color is not None
        spans = rows[1].render().spans
        assert any(s.style == critical for s in spans)
        await pilot.press("j", "enter")  # GPU 1's detail says why, in words
        await until(
            pilot,
            "GPU 1's alert in its detail",
            lambda: "✖ GPU 1 (TP1) at 94 °C (critical from 90 °C)" in screen_text(app),
        )


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(v: int) -> float:
        x = v / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    r, g, b = rgb
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def _contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


async def test_alert_colours_readable_in_every_theme() -> None:
    """The demo with GPU 1 hot, GPU 2 warm and GPU 3 lost, in every built-in theme: the row
    says it in words and glyphs, and the alert colours keep a contrast of at least 3:1 (WCAG's
    floor for bold text) against the row's background. The ansi-* themes are left to the
    terminal's own palette (their colours are the terminal's, not the theme's)."""
    from kvtop.model.memory.gpu_memory import lost_memory
    from tests.support.still import still_snapshot

    snapshot = still_snapshot()
    gpus = list(snapshot.gpus)
    gpus[1] = replace(gpus[1], sample=replace(gpus[1].sample, temperature_c=94))
    gpus[2] = replace(gpus[2], sample=replace(gpus[2].sample, temperature_c=85))
    gpus[3] = replace(gpus[3], sample=replace(gpus[3].sample, status="lost"), memory=lost_memory())
    app = make_app(judged(replace(snapshot, gpus=tuple(gpus))))
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "GPU 3 lost", lambda: "✖ lost: fell off the bus" in screen_text(app))
        poor = []
        for theme in sorted(app.available_themes):
            app.theme = theme
            await pilot.pause()
            table = gpu_table(app)
            background = table.rich_style.bgcolor
            assert background is not None
            for level in ("critical", "warning"):
                colour = table.component_style(f"gpu--{level}").color
                assert colour is not None
                ratio = _contrast(colour.get_truecolor(), background.get_truecolor())
                if ratio < 3.0 and not theme.startswith("ansi"):
                    poor.append((theme, level, round(ratio, 2)))
            text = screen_text(app)
            assert "✖ lost" in text and re.search(r"(?m)^\S?\s*1\s+TP1.*✖$", text)
            assert re.search(r"(?m)^\S?\s*2\s+TP2.*▲$", text)
        assert not poor, poor
