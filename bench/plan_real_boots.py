"""Plan every real boot in tests/fixtures/real-boots before launch and calibrated by its own log,
and print the table docs/plan.md keeps ("The plan on real boots"): the logged
max_total_num_tokens, each plan's and its error, and the inputs that drive the error before
launch (free memory before the weights and weights per rank, planned against logged).

    .venv/bin/python bench/plan_real_boots.py            # markdown table
    .venv/bin/python bench/plan_real_boots.py --json     # one object per boot
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.real_boots import all_boots, error_pct, plan


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "refused" if value is None else f"{value:+.2f} %"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    rows = []
    for boot in all_boots():
        before, calibrated = plan(boot, calibrated=False), plan(boot, calibrated=True)
        logged = boot.meta["logged"]
        rank = (before.plan or {}).get("ranks", [{}])[0] if before.plan else {}
        rows.append(
            {
                "boot": boot.slug,
                "gpu": boot.meta.get("gpu_name") or "not named",
                "gpus": boot.meta.get("gpu_count"),
                "sglang": boot.meta.get("sglang_version"),
                "logged_tokens": boot.logged_tokens,
                "before_tokens": before.tokens,
                "before_error_pct": error_pct(before.tokens, boot.logged_tokens),
                "before_said": before.said or None,
                "platform": ((before.plan or {}).get("startup_memory") or {}).get("platform"),
                "pre_load_free_gib": (before.plan or {}).get("pre_load_free_gib"),
                "logged_pre_load_free_gib": logged.get("pre_load_free_gib"),
                "weights_gib": rank.get("weights_gib"),
                "logged_weights_gib": logged.get("weights_gib_per_rank"),
                "verdict": ((before.plan or {}).get("verdict") or {}).get("kind"),
                "calibrated_tokens": calibrated.tokens,
                "calibrated_error_pct": error_pct(calibrated.tokens, boot.logged_tokens),
                "calibrated_said": calibrated.said or None,
            }
        )
    if opts.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(
        "| boot | GPUs | SGLang | logged tokens | before launch | error | free before weights "
        "(plan / log) | weights per rank (plan / log) | calibrated | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['boot']} | {r['gpus']} × {r['gpu']} | {r['sglang']} | "
            f"{r['logged_tokens']:,} | {r['before_tokens'] or 0:,} | "
            f"{_pct(r['before_error_pct'])} | {_fmt(r['pre_load_free_gib'])} / "
            f"{_fmt(r['logged_pre_load_free_gib'])} | {_fmt(r['weights_gib'])} / "
            f"{_fmt(r['logged_weights_gib'])} | {r['calibrated_tokens'] or 0:,} | "
            f"{_pct(r['calibrated_error_pct'])} |"
        )
    before = [abs(r["before_error_pct"]) for r in rows if r["before_error_pct"] is not None]
    calib = [abs(r["calibrated_error_pct"]) for r in rows if r["calibrated_error_pct"] is not None]
    print()
    print(
        f"before launch: {sum(e <= 2 for e in before)} of {len(rows)} within 2 %, median "
        f"|error| {statistics.median(before) if before else float('nan'):.2f} %; calibrated: "
        f"{sum(e <= 1 for e in calib)} of {len(rows)} within 1 %"
    )
    for r in rows:
        for key in ("before_said", "calibrated_said"):
            if r[key]:
                print(f"{r['boot']} {key.split('_')[0]}: {r[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
