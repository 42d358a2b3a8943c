"""kvtop and nvitop side by side on the same fake GPUs: CPU, RSS, first frame, and the ratios.

    python bench/bench_vs_nvitop.py                            # 8 GPUs, 3 rounds, 60 s windows
    python bench/bench_vs_nvitop.py --gpus 8 16 64 --rounds 1  # how cost grows with GPUs
    python bench/bench_vs_nvitop.py --seconds 20 --rounds 2 --no-micro
    python bench/bench_vs_nvitop.py --seconds 40 --no-micro \
        --also "h11=/work/wt-h11/.venv/bin/kvtop" --also "stock=KVTOP_STOCK_DRIVER=1 kvtop"

Both tools run on the fake libnvidia-ml.so.1 from tests/support/fake_nvml, whose GPUs change every
second (this script rewrites its state file), each in a 120×40 tmux pane at a 1 s refresh, in
turn (the order alternates between rounds). By default the setup a GPU host has: eight live
processes titled as SGLang's schedulers hold the first eight GPUs, in the fake's process lists,
so both tools list (and read) the same real processes (`--no-processes`: none). kvtop runs its full live view: the story log
followed from a file and a loopback SGLang /metrics server (tests/support/sglang_http.py). nvitop is
installed from PyPI (pinned below) into bench/out/nvitop-venv on first use; it needs the
package index once.

Per tool: CPU of the whole process tree over the window (percent of one core, from /proc),
RSS at the end, time from start to the first frame that shows the GPU rows; the median over
rounds, and kvtop/nvitop and kvtop/floor (the bare Textual app of the same run) for each. Then micro figures: one NVML poll cycle, one /metrics parse,
the journal follow cost per entry, and one overview repaint with 8 GPUs. `--also NAME=[VAR=VALUE ...] PROGRAM` adds a kvtop variant to the same
rounds (PROGRAM `kvtop` is this checkout's; another path, for example another worktree's venv,
runs that code): the way to compare two versions of kvtop when only ratios within one run mean
anything on a shared machine. Prints; asserts nothing. Targets: CPU ≤ 0.8× nvitop's, RSS ≤ 1.8×
nvitop's, first frame under 1 s and ≤ 1.5× the floor's, 64 GPUs under 10 % of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from pane_measure import (  # noqa: E402
    HEIGHT,
    KVTOP,
    KVTOP_ROW,
    WIDTH,
    FakeHost,
    Figures,
    compile_bytecode,
    measure,
    ready_to_run,
    rows_seen,
)

from tests.support.sglang_procs import start_server, stop_server  # noqa: E402

NVITOP_VERSION = "1.7.2"
NVITOP_VENV = ROOT / "bench" / "out" / "nvitop-venv"
FLOOR_APP = ROOT / "bench" / "textual_floor.py"
FIRST_ROWS = 8  # both tools show at least this many GPU rows in a 40-line pane
# nvitop's GPU row: `│   0  RTX PRO 6000 …  N/A │ 0000…` (kvtop's: pane_measure.KVTOP_ROW).
NVITOP_ROW = re.compile(r"^│\s*(?P<gpu>\d+)\s+\S.*│")

# The speed goals (docs/performance.md), on the setup a GPU host has (figures changing every
# second, the same live rank processes listed for both tools): CPU ≤ 0.8× nvitop's, RSS ≤ 1.8×
# nvitop's, the first frame ≤ 1.5× the bare Textual app's (the floor, measured in the same run).
TARGET_CPU_RATIO, TARGET_RSS_RATIO, TARGET_FIRST_FLOOR_RATIO = 0.8, 1.8, 1.5
TARGET_FIRST_S, TARGET_64_CPU_PCT = 1.0, 10.0
# The story is TP8: at most this many live rank processes, one on each of the first GPUs.
RANK_PROCESSES = 8
RANK_MIB = 135_000
RANK_LIFETIME_S = 6 * 3600


def ensure_nvitop() -> Path:
    """nvitop==NVITOP_VERSION in its own venv (its dependencies must not touch kvtop's)."""
    binary = NVITOP_VENV / "bin" / "nvitop"
    if binary.exists():
        probe = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
        if NVITOP_VERSION in probe.stdout:
            return binary
    print(f"installing nvitop=={NVITOP_VERSION} into {NVITOP_VENV} ...", flush=True)
    NVITOP_VENV.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--clear", str(NVITOP_VENV)], check=True)
    subprocess.run(
        [str(NVITOP_VENV / "bin" / "pip"), "install", "-q", f"nvitop=={NVITOP_VERSION}"],
        check=True,
    )
    return binary


@contextlib.contextmanager
def ranks_for(count: int, off: bool) -> Iterator[tuple[tuple[int, int, int | None], ...]]:
    """Live processes titled as SGLang's schedulers (sglang::scheduler_TP0…), one on each of
    the first GPUs with the story's memory: what both tools list on a GPU host."""
    if off:
        yield ()
        return
    # They must outlive every round (three tools × rounds × windows), or later rounds would list
    # dead pids: stop_server ends them.
    main, schedulers = start_server(min(count, RANK_PROCESSES), lifetime_s=RANK_LIFETIME_S)
    try:
        yield tuple(
            (i, schedulers[f"TP{i}"].pid, RANK_MIB) for i in range(min(count, RANK_PROCESSES))
        )
    finally:
        stop_server(main, schedulers)


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def med(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def variant(spec: str) -> tuple[str, list[str], dict[str, str]]:
    """`NAME=[VAR=VALUE ...] PROGRAM` -> (name, argv prefix, environment)."""
    name, _, rest = spec.partition("=")
    words = shlex.split(rest)
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("/"))
    program = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
    if not name or name in {"kvtop", "nvitop", "floor"} or len(program) != 1:
        raise SystemExit(f"--also {spec!r}: want NAME=[VAR=VALUE ...] PROGRAM, NAME new")
    return name, [str(KVTOP) if program[0] == "kvtop" else program[0]], env


def pythonpaths(envs: Iterable[dict[str, str]]) -> list[Path]:
    """The folders the `--also` variants put on PYTHONPATH (their kvtop's code)."""
    return [
        Path(folder)
        for env in envs
        for folder in env.get("PYTHONPATH", "").split(os.pathsep)
        if folder
    ]


def compare(results: dict[int, dict[str, list[Figures]]], secs: float, rounds: int) -> None:
    print()
    print(f"median over {rounds} round(s), {secs:g} s windows, 1 s refresh, {WIDTH}×{HEIGHT} pane")
    head = f"{'GPUs':>4}  {'tool':<7} {'CPU % core':>10} {'RSS MB':>8} {'first frame s':>14}"
    print(head)
    for count, by_tool in results.items():
        row: dict[str, tuple[float | None, float | None, float | None]] = {}
        for tool, figures in by_tool.items():
            cpu = med([f.cpu_pct for f in figures])
            rss = med([f.rss_mb for f in figures])
            first = med([f.first_frame_s for f in figures])
            row[tool] = (cpu, rss, first)
            print(f"{count:>4}  {tool:<7} {fmt(cpu):>10} {fmt(rss, 1):>8} {fmt(first, 3):>14}")
            spread = [f.cpu_pct for f in figures if f.cpu_pct is not None]
            if len(spread) > 1:
                print(f"        rounds ({tool}): " + " ".join(f"{c:.2f}" for c in spread))
            for f in figures:
                if f.note:
                    print(f"        note ({tool}): {f.note}")
        (kc, kr, kf), (nc, nr, nf) = row["kvtop"], row["nvitop"]
        if "floor" in row and kc is not None and row["floor"][0] is not None:
            print(
                f"        Textual's floor {row['floor'][0]:.2f} %: kvtop's own work "
                f"{kc - row['floor'][0]:.2f} % of a core"
            )
        cr, rr, fr = ratio(kc, nc), ratio(kr, nr), ratio(kf, nf)
        print(
            f"{count:>4}  {'ratio':<7} {fmt(cr):>10} {fmt(rr):>8} {fmt(fr):>14}   (kvtop / nvitop)"
        )
        floor = row.get("floor", (None, None, None))
        fc, frs, ff = ratio(kc, floor[0]), ratio(kr, floor[1]), ratio(kf, floor[2])
        print(
            f"{count:>4}  {'ratio':<7} {fmt(fc):>10} {fmt(frs):>8} {fmt(ff):>14}   (kvtop / floor)"
        )
        verdicts = [
            (f"CPU ≤ {TARGET_CPU_RATIO:g}× nvitop", cr is not None and cr <= TARGET_CPU_RATIO),
            (f"RSS ≤ {TARGET_RSS_RATIO:g}× nvitop", rr is not None and rr <= TARGET_RSS_RATIO),
            ("first frame < 1 s", kf is not None and kf < TARGET_FIRST_S),
            (
                f"first frame ≤ {TARGET_FIRST_FLOOR_RATIO:g}× the floor",
                ff is not None and ff <= TARGET_FIRST_FLOOR_RATIO,
            ),
        ]
        if count >= 64:
            verdicts.append(("kvtop < 10 % of a core", kc is not None and kc < TARGET_64_CPU_PCT))
        print(
            "        " + "; ".join(f"{name}: {'met' if ok else 'MISSED'}" for name, ok in verdicts)
        )
        for tool, (vc, vr, vf) in row.items():
            if tool in {"kvtop", "nvitop", "floor"}:
                continue
            print(
                f"{count:>4}  {'ratio':<7} {fmt(ratio(vc, nc)):>10} {fmt(ratio(vr, nr)):>8} "
                f"{fmt(ratio(vf, nf)):>14}   ({tool} / nvitop)"
            )
            print(
                f"{count:>4}  {'ratio':<7} {fmt(ratio(kc, vc)):>10} {fmt(ratio(kr, vr)):>8} "
                f"{fmt(ratio(kf, vf)):>14}   (kvtop / {tool})"
            )


# --------------------------------------------------------------------------- micro figures


def micro_nvml(env: dict[str, str], polls: int = 50) -> str:
    """One NvmlSource.poll() on the fake (in a child: the library path is read at startup)."""
    code = f"""
import json, statistics, time
from kvtop.sources.nvml import NvmlSource
source = NvmlSource(process_interval_s=0)
source.poll()
walls, cpus = [], []
for _ in range({polls}):
    w, c = time.perf_counter(), time.process_time()
    source.poll()
    walls.append(time.perf_counter() - w); cpus.append(time.process_time() - c)
source.close()
print(json.dumps([statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode != 0:
        return f"NVML poll: failed ({out.stderr.strip().splitlines()[-1:]})"
    wall, cpu = json.loads(out.stdout)
    return (
        f"NVML poll cycle (8 GPUs, processes included): {wall:.2f} ms wall, {cpu:.2f} ms CPU "
        "(the fake re-reads its state file on every call)"
    )


def micro_metrics(runs: int = 50) -> str:
    from kvtop.sglang.metrics import parse_exposition
    from tests.support.sglang_http import Deployment, build_exposition

    text = build_exposition(Deployment(version="0.5.12", tp_size=8))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        parse_exposition(text)
        times.append(time.perf_counter() - start)
    return (
        f"/metrics parse: {statistics.median(times) * 1e3:.2f} ms for a "
        f"{len(text) / 1000:.0f} KB exposition"
    )


def micro_journal() -> str:
    try:
        from bench_journal_seek import build, follow_cost, journal_remote_missing
    except ImportError as exc:  # systemd-python missing
        return f"journal follow: not measured ({exc})"
    why = journal_remote_missing()
    if why:
        return f"journal follow: not measured ({why})"
    per_entry_us, _ = follow_cost(build(10_000, False), 5_000)
    return f"journal follow: {per_entry_us:.1f} µs CPU per new entry"


def micro_render(frames: int = 40) -> str:
    """The overview with 8 GPUs under Textual's test driver: a new snapshot repainted (only
    what changed), and a full repaint of every widget."""
    from kvtop.live.app import KvtopApp
    from tests.support.still import STILL_EPOCH, StillFeed, still_series

    series = still_series(frames + 1)

    async def run() -> tuple[float, float]:
        app = KvtopApp(
            StillFeed(series[0], interval_s=5.0),  # still_series' spacing: no history gaps
            source_label="demo",
            demo=True,
            clock=lambda: STILL_EPOCH,
            host_name="gpu-host",
        )
        update, full = [], []
        async with app.run_test(size=(WIDTH, HEIGHT)) as pilot:
            await pilot.pause()
            for snapshot in series[1:]:
                start = time.process_time()
                app.apply(snapshot)
                await pilot.pause()
                update.append(time.process_time() - start)
                start = time.process_time()
                for widget in app.screen.walk_children(with_self=True):
                    widget.refresh()
                await pilot.pause()
                full.append(time.process_time() - start)
        return statistics.median(update) * 1e3, statistics.median(full) * 1e3

    update_ms, full_ms = asyncio.run(run())
    return (
        f"overview repaint, 8 GPUs: {update_ms:.1f} ms CPU for a new snapshot, "
        f"{full_ms:.1f} ms for every widget (Textual's test driver included)"
    )


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="CPU window per run")
    parser.add_argument("--no-micro", action="store_true", help="skip the micro figures")
    parser.add_argument(
        "--no-processes",
        action="store_true",
        help="no GPU processes (the older setup): by default live SGLang rank processes, one on "
        "each of the first 8 GPUs, listed for both tools",
    )
    parser.add_argument(
        "--nvml-init-ms",
        type=int,
        default=0,
        metavar="MS",
        help="the fake driver's nvmlInit takes MS milliseconds (a host without persistence "
        "mode loads the driver at init): what it adds to each tool's first frame",
    )
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=[VAR=VALUE ...] PROGRAM",
        help="another kvtop to run in the same rounds (see the module docstring)",
    )
    args = parser.parse_args()
    extra = [variant(spec) for spec in args.also]
    why = ready_to_run()
    if why:
        print(why, file=sys.stderr)
        return 2
    nvitop = ensure_nvitop()
    compile_bytecode(ROOT / "tui", *pythonpaths(env for _, _, env in extra))
    results: dict[int, dict[str, list[Figures]]] = {}
    micro: list[str] = []
    try:
        with FakeHost("kvtop-vs-nvitop") as host:
            print(
                f"machine: {os.cpu_count()} CPUs · kvtop {KVTOP} · nvitop {NVITOP_VERSION} · "
                f"{args.rounds} round(s) × {args.seconds:g} s per tool and GPU count"
            )
            for count in args.gpus:
                tools = {
                    "kvtop": (host.kvtop_argv(), rows_seen(KVTOP_ROW, count, FIRST_ROWS)),
                    "nvitop": (
                        [str(nvitop), "--interval", "1"],
                        rows_seen(NVITOP_ROW, count, FIRST_ROWS),
                    ),
                    # Textual's own cost: one Static updated per second (bench/textual_floor.py).
                    "floor": ([sys.executable, str(FLOOR_APP)], lambda s: "floor " in s),
                }
                envs = {name: extra_env for name, _, extra_env in extra}
                for name, program, _ in extra:
                    argv = program + host.kvtop_argv()[1:]
                    tools[name] = (argv, rows_seen(KVTOP_ROW, count, FIRST_ROWS))
                results[count] = {name: [] for name in tools}
                # Each tool calls one of NVML's three inits, once.
                init = tuple(
                    (name, args.nvml_init_ms)
                    for name in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit")
                    if args.nvml_init_ms
                )
                with (
                    ranks_for(count, args.no_processes) as procs,
                    host.gpus(count, procs, init) as env,
                ):
                    for round_no in range(args.rounds):
                        order = list(tools) if round_no % 2 == 0 else list(reversed(tools))
                        for name in order:
                            argv, first = tools[name]
                            label = f"{name} {count} GPUs r{round_no + 1}"
                            print(f"running: {label} ...", flush=True)
                            results[count][name].append(
                                measure(
                                    host.tmux,
                                    host.work,
                                    label,
                                    argv,
                                    {**env, **envs.get(name, {})},
                                    first,
                                    args.seconds,
                                )
                            )
            if not args.no_micro:
                print("micro figures ...", flush=True)
                with host.gpus(8) as env:
                    micro = [micro_nvml(env), micro_metrics(), micro_journal(), micro_render()]
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    compare(results, args.seconds, args.rounds)
    if micro:
        print()
        for line in micro:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
