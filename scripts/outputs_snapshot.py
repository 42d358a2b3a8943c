"""Every output a refactor must leave unchanged, written to one folder to compare across commits.

    .venv/bin/python scripts/outputs_snapshot.py OUT          # write OUT/<name> for each output
    .venv/bin/python scripts/outputs_snapshot.py --diff A B   # the outputs that differ

What is written: `kvtop --once` text and `--json` over every fixture log and the story log, the
demo's `--once --json`, `--check` over each, the exporter's body on the story log, the fleet's
JSON over the recorded Prometheus bodies is left to its own tests (it needs a Prometheus), and
`kvtop plan --json` over every real boot (before launch and calibrated). All without GPUs or a
server (no NVML library on the loader's path, `--no-metrics`), in UTC, 100 columns.

What changes from one run to the next whatever the code (ages, "ago", durations since a log's
time, host CPU and memory, pids) is masked, so two runs of one commit give the same files.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KVTOP = Path(sys.executable).with_name("kvtop")
LOGS = sorted((ROOT / "tests/fixtures/sglang-logs").glob("*.log"))
STORY = ROOT / "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log"

# Figures that move with the clock or the host, whatever the code.
_VOLATILE_KEYS = {
    "age_s",
    "taken_at",
    "elapsed_s",
    "cpu_percent",
    "rss_gib",
    "host",
    "since_s",
    "for_s",
    "now",
    "generated_at",
}
_VOLATILE_TEXT = [
    (re.compile(r"\d+(?:\.\d+)? ?s ago"), "N s ago"),
    (re.compile(r"\b\d+d\d+h\b|\b\d+h\d+m\b|\b\d+m\d+s\b|\b\d+(?:\.\d+)?s\b"), "DUR"),
    (re.compile(r"since \d{4}-\d\d-\d\d\s+\d\d:\d\d:\d\d"), "since NOW"),
    (re.compile(r"host CPU [^)]*\)\)"), "host CPU …))"),
    (
        re.compile(r"\b\d{4}-\d\d-\d\d(?:T|\s+)\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"),
        "TIME",
    ),
]


def _env() -> dict[str, str]:
    drop = ("LD_LIBRARY_PATH", "KVTOP_FAKE_NVML_STATE", "ROCM_PATH", "FAKE_AMDSMI_FILE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(TZ="UTC", COLUMNS="100", NO_COLOR="1")
    return env


def _mask_json(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: ("…" if k in _VOLATILE_KEYS else _mask_json(v)) for k, v in sorted(value.items())
        }
    if isinstance(value, list):
        return [_mask_json(v) for v in value]
    if isinstance(value, str):
        return _mask_text(value)
    return value


def _mask_text(text: str) -> str:
    for pattern, word in _VOLATILE_TEXT:
        text = pattern.sub(word, text)
    return text


def _run(args: list[str]) -> tuple[int, str]:
    done = subprocess.run(
        [str(KVTOP), *args], capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120
    )
    return done.returncode, done.stdout + ("\n--- stderr\n" + done.stderr if done.stderr else "")


def _coarse(value: object) -> object:
    """The demo's live figures move with its clock: numbers to one significant figure."""
    if isinstance(value, dict):
        return {k: _coarse(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_coarse(v) for v in value]
    if isinstance(value, float | int) and not isinstance(value, bool) and value:
        return float(f"{value:.1g}")
    return value


def _write(
    out: Path, name: str, status: int, text: str, as_json: bool, coarse: bool = False
) -> None:
    if as_json:
        try:
            found = _mask_json(json.loads(text.split("\n--- stderr\n")[0]))
            body = json.dumps(_coarse(found) if coarse else found, indent=1)
        except ValueError:
            body = _mask_text(text)
    else:
        body = _mask_text(text)
    (out / name).write_text(f"exit {status}\n{body}\n")


def snapshot(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for log in [STORY, *LOGS]:
        stem = log.stem
        base = ["--log-file", str(log), "--no-metrics"]
        _write(out, f"once-{stem}.txt", *_run(["--once", *base]), False)
        _write(out, f"once-{stem}.json", *_run(["--once", "--json", *base]), True)
        _write(out, f"check-{stem}.txt", *_run(["--check", *base]), False)
    _write(out, "demo-once.json", *_run(["--once", "--json", "--demo"]), True, coarse=True)
    for boot in sorted((ROOT / "tests/fixtures/real-boots").glob("*/boot.json")):
        meta = json.loads(boot.read_text())
        model = (boot.parent / meta.get("model_dir", ".")).resolve()
        log = (boot.parent / meta.get("log", "boot.log")).resolve()
        args = ["plan", "--model", str(model), "--json", "--gpu-memory", str(meta["gpu_total_gib"])]
        if meta.get("gpu_name"):
            args += ["--gpu-name", meta["gpu_name"]]
        if meta.get("sglang_version"):
            args += ["--sglang-version", meta["sglang_version"]]
        if meta.get("checkpoint_gib") is not None:
            args += ["--weights-gib", str(meta["checkpoint_gib"])]
        tail = ["--", *meta.get("launch_args", [])]
        name = boot.parent.name
        _write(out, f"plan-{name}.json", *_run([*args, *tail]), True)
        _write(out, f"plan-{name}-log.json", *_run([*args, "--from-log", str(log), *tail]), True)


def diff(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    changed = 0
    for name in names:
        left = (a / name).read_text().splitlines() if (a / name).exists() else []
        right = (b / name).read_text().splitlines() if (b / name).exists() else []
        if left != right:
            changed += 1
            print(f"== {name}")
            for line in list(difflib.unified_diff(left, right, lineterm="", n=1))[:40]:
                print(line)
    print(f"{changed} of {len(names)} outputs differ")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("A", "B"))
    opts = parser.parse_args()
    if opts.diff:
        return diff(*opts.diff)
    if opts.out is None:
        parser.error("give OUT, or --diff A B")
    snapshot(opts.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
