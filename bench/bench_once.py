#!/usr/bin/env python3
"""Time `kvtop --once --json --log-file` on a ~1,000,000-line SGLang 0.5.8 log.

    python bench/bench_once.py                       # build a temp log, time `kvtop` 3 times
    python bench/bench_once.py --out bench/out       # keep the log (bench/out/ is git-ignored)
    python bench/bench_once.py --kvtop "python -m kvtop" --repeat 5
    python bench/bench_once.py --build-only --out bench/out

The log is the story's startup (tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log,
up to and including "The server is fired up and ready to roll!") followed by generated TP0
`Prefill batch, ...` / `Decode batch, ...` lines in the 0.5.8 format (trailing ", "), with
deterministic pseudo-random values and increasing timestamps, up to --lines lines in all.

The budget is 2 s for the whole `--once` run on a 2-core machine; by default the child is
pinned to 2 CPUs (--cpus) to approximate that. This script prints figures and a verdict; it
asserts nothing about time (exit status 0 unless kvtop fails or prints something unexpected;
--strict makes an over-budget run exit 3). Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STORY_LOG = REPO / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
READY = "The server is fired up and ready to roll!"
KV_TOKENS = 159277  # max_total_num_tokens of the story
MAX_RUNNING = 48
BUDGET_S = 2.0
SCHEMA = "kvtop/1"
CHUNK_LINES = 50_000
TS_RE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def story_startup() -> tuple[list[str], dt.datetime]:
    """The fixture's lines up to the ready line, and the ready line's timestamp."""
    lines = STORY_LOG.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if READY in line:
            m = TS_RE.match(line)
            if not m:
                break
            return lines[: i + 1], dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    raise SystemExit(f"{STORY_LOG}: no timestamped '{READY}' line; regenerate the fixture")


def build_log(path: Path, total_lines: int, seed: int) -> int:
    """Write the benchmark log; return the number of lines written."""
    head, ready_at = story_startup()
    rng = random.Random(seed)
    rand = rng.random  # int(rand() * n) is several times cheaper than randint()
    day = ready_at.replace(hour=0, minute=0, second=0)
    sec = (ready_at - day).total_seconds() + 10.0
    running, tokens, queued = 12, 48_211, 0
    prefix_sec = -1
    prefix = ""
    date_day = -1
    date = ""
    written = 0
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(head) + "\n")
        written += len(head)
        chunk: list[str] = []
        while written + len(chunk) < total_lines:
            sec += rand() * 2.0  # one batch line a second on average
            whole = int(sec)
            if whole != prefix_sec:
                prefix_sec = whole
                days, rem = divmod(whole, 86_400)
                h, rem = divmod(rem, 3600)
                mnt, s = divmod(rem, 60)
                if days != date_day:
                    date_day = days
                    date = (day + dt.timedelta(days=days)).strftime("%Y-%m-%d")
                prefix = f"[{date} {h:02d}:{mnt:02d}:{s:02d} TP0] "
            # A mean-reverting walk of load (about 16 running, usage around 0.6): requests
            # arrive in prefill batches, each decode interval may finish one.
            if rand() < 0.25:
                new_seq = 1 + int(rand() * 2)
                new_tok = 200 + int(rand() * 5800)
                cached = int(rand() * 3) * 1536
                running_before = running
                if running + new_seq > MAX_RUNNING:
                    queued += 1
                    new_seq = MAX_RUNNING - running
                elif queued:
                    queued -= 1
                if new_seq == 0:
                    continue
                running += new_seq
                tokens = min(KV_TOKENS, tokens + new_tok + cached)
                chunk.append(
                    f"{prefix}Prefill batch, #new-seq: {new_seq}, #new-token: {new_tok}, "
                    f"#cached-token: {cached}, token usage: {tokens / KV_TOKENS:.2f}, "
                    f"#running-req: {running_before}, #queue-req: {queued}, "
                )
            else:
                if running > 1 and rand() < running / 32:
                    tokens -= tokens // running
                    running -= 1
                tokens = min(KV_TOKENS, tokens + running * (90 + int(rand() * 40)))
                acc = 2.4 + rand() * 0.8
                thr = running * acc / (0.055 + 0.0011 * running)
                chunk.append(
                    f"{prefix}Decode batch, #running-req: {running}, #token: {tokens}, "
                    f"token usage: {tokens / KV_TOKENS:.2f}, accept len: {acc:.2f}, "
                    f"accept rate: {(acc - 1) / 3:.2f}, cuda graph: True, "
                    f"gen throughput (token/s): {thr:.2f}, #queue-req: {queued}, "
                )
            if len(chunk) >= CHUNK_LINES:
                f.write("\n".join(chunk) + "\n")
                written += len(chunk)
                chunk.clear()
        if chunk:
            f.write("\n".join(chunk) + "\n")
            written += len(chunk)
    return written


def default_kvtop() -> str | None:
    found = shutil.which("kvtop")
    if found:
        return found
    beside = Path(sys.executable).with_name("kvtop")  # the venv's console script
    return str(beside) if beside.exists() else None


def pin_to(cpus: int):
    """preexec_fn that restricts the child to `cpus` of the CPUs this process may use."""
    if cpus <= 0 or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))[:cpus]

    def _pin() -> None:
        os.sched_setaffinity(0, allowed)

    return _pin


def time_runs(cmd: list[str], repeat: int, cpus: int, timeout: float) -> list[float]:
    times: list[float] = []
    for i in range(repeat):
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                timeout=timeout,
                preexec_fn=pin_to(cpus),
                check=False,
            )
        except subprocess.TimeoutExpired:
            msg = f"run {i + 1}: no answer within {timeout:.0f} s: {shlex.join(cmd)}"
            raise SystemExit(msg) from None
        except FileNotFoundError:
            raise SystemExit(f"cannot run {cmd[0]!r}: not found. Pass --kvtop 'CMD'.") from None
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = proc.stderr.decode("utf-8", "replace")[-2000:]
            raise SystemExit(f"run {i + 1}: exit status {proc.returncode}\n{tail}")
        try:
            doc = json.loads(proc.stdout)
        except ValueError as exc:
            raise SystemExit(f"run {i + 1}: stdout is not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise SystemExit(f'run {i + 1}: expected "schema": "{SCHEMA}", got {got!r}')
        times.append(elapsed)
        print(f"  run {i + 1}: {elapsed:.3f} s")
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=1_000_000, help="total lines (default 1e6)")
    p.add_argument("--out", type=Path, help="write the log here and keep it (default: temp)")
    p.add_argument("--kvtop", help="command to run (default: the installed `kvtop`)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs (default 3)")
    p.add_argument("--cpus", type=int, default=2, help="pin the child to N CPUs (0: no pin)")
    p.add_argument("--seed", type=int, default=20260227)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    p.add_argument("--build-only", action="store_true", help="build the log, time nothing")
    p.add_argument("--strict", action="store_true", help="exit 3 when over the budget")
    a = p.parse_args(argv)

    tmp: tempfile.TemporaryDirectory[str] | None = None
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        out_dir = a.out
    else:
        tmp = tempfile.TemporaryDirectory(prefix="kvtop-bench-")
        out_dir = Path(tmp.name)
    log_path = out_dir / f"sglang-0.5.8-{a.lines}-lines.log"
    try:
        t0 = time.perf_counter()
        n = build_log(log_path, a.lines, a.seed)
        build_s = time.perf_counter() - t0
        size = log_path.stat().st_size
        print(f"log: {log_path}")
        print(f"  {n:,} lines, {size / 2**20:.1f} MiB, built in {build_s:.2f} s")
        if a.build_only:
            return 0

        kvtop = a.kvtop or default_kvtop()
        if not kvtop:
            print(
                "kvtop is not installed here: run `pip install -e .` in the repository, "
                "or pass --kvtop 'python -m kvtop'.",
                file=sys.stderr,
            )
            return 2
        cmd = [*shlex.split(kvtop), "--once", "--json", "--log-file", str(log_path)]
        pinned = pin_to(a.cpus) is not None
        cores = f"pinned to {a.cpus} CPUs" if pinned else f"unpinned, {os.cpu_count()} CPUs"
        print(f"command: {shlex.join(cmd)}  ({cores})")
        times = time_runs(cmd, a.repeat, a.cpus, a.timeout)
        best, median = min(times), statistics.median(times)
        # Linux reports ru_maxrss in KiB, macOS in bytes.
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        rss_mib = rss / 2**20 if sys.platform == "darwin" else rss / 2**10
        print(f"best {best:.3f} s, median {median:.3f} s over {len(times)} runs")
        print(f"  {n / best:,.0f} lines/s, {size / 2**20 / best:.1f} MiB/s (best)")
        print(f"  peak RSS of the child: {rss_mib:.1f} MiB")
        verdict = "OK" if median < BUDGET_S else "OVER BUDGET"
        print(
            f"budget: under {BUDGET_S:.0f} s on a 2-core machine -> {verdict} "
            f"(median {median:.3f} s)"
        )
        return 3 if a.strict and median >= BUDGET_S else 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
