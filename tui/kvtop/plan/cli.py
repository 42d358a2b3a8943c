"""`kvtop plan`: SGLang's KV pool before launch, from the model's config and the launch's own
arguments (and an earlier boot's log to calibrate what a config cannot tell)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from dataclasses import replace

from kvtop import help_format
from kvtop.model.sizing.calibration import Calibration, CalibrationError
from kvtop.model.sizing.engine import Gpus, ModelInfo, PlanInputError, build
from kvtop.model.sizing.formula import SAFE_HEADROOM_GIB, parse_version
from kvtop.model.sizing.launch_args import (
    LaunchArgsError,
    launch_shape_problem,
    merge_launch_args,
    parse_launch_args,
)
from kvtop.model.sizing.plan import FITS, NOT_ENOUGH_MEMORY, OOM_RISK, POOL_UNDER_CONTEXT
from kvtop.option_rules import (
    FREE_NOW,
    MAX_GPU_GIB,
    MIN_GPU_GIB,
    PLAN,
    first_problem,
    gpu_memory_gib,
    refuse,
)
from kvtop.options import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE
from kvtop.plan.gather import (
    GatherError,
    calibration_of,
    installed_sglang,
    read_boot,
    read_gpus,
    read_model,
)
from kvtop.plan.report import PlanContext, plan_json, plan_text
from kvtop.report.plain_output import takes_unicode, write_json

# SGLang starts, but one request of the full context does not fit in its pool.
EXIT_POOL_UNDER_CONTEXT = 3
EXIT_OOM_RISK = 4
EXIT_NOT_ENOUGH_MEMORY = 5
EXIT_BY_VERDICT = {
    FITS: EXIT_OK,
    POOL_UNDER_CONTEXT: EXIT_POOL_UNDER_CONTEXT,
    OOM_RISK: EXIT_OOM_RISK,
    NOT_ENOUGH_MEMORY: EXIT_NOT_ENOUGH_MEMORY,
}

_EXAMPLES = (
    ("kvtop plan --from-log sglang.log -- --mem-fraction-static 0.90", "this server at 0.90"),
    ("kvtop plan --unit sglang-kimi -- --kv-cache-dtype fp8_e4m3", "the unit's boot with fp8 KV"),
    ("kvtop plan --model DIR --gpu-memory 80 -- --tp-size 8", "before any boot, on 8 × 80 GiB"),
    ("kvtop plan --model DIR --json -- --tp-size 8", "schema kvtop-plan/1, the GPUs NVML sees"),
)

_EPILOG = f"""\
Arguments after `--` are SGLang's launch_server arguments (--tp-size, --mem-fraction-static,
--kv-cache-dtype, --page-size, --context-length, --max-total-tokens, --max-running-requests,
--cuda-graph-max-bs, --speculative-algorithm, --enable-dp-attention, ...). With --from-log or
--unit, those not given are the logged boot's server_args.

examples:
{help_format.examples(_EXAMPLES)}

exit status: {EXIT_OK} fits, {EXIT_POOL_UNDER_CONTEXT} pool_under_context, {EXIT_OOM_RISK} oom_risk, {EXIT_NOT_ENOUGH_MEMORY} not_enough_memory,
{EXIT_UNREADABLE} an input could not be read, {EXIT_USAGE} bad usage (see docs/plan.md)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtop plan",
        usage="%(prog)s [options] -- [SGLang arguments]",
        description=(
            "SGLang's KV pool before launch: per rank the weights, SGLang's reserve, the KV "
            "budget, max_total_num_tokens, max_running_requests, CUDA graphs and the free "
            "memory after startup.\n\nA verdict (fits, not_enough_memory, oom_risk) with the "
            "flags that fix it."
        ),
        epilog=_EPILOG,
        formatter_class=help_format.formatter(),
    )
    parser.add_argument(
        "--model",
        metavar="DIR|config.json",
        help="the model's directory (config.json, model.safetensors.index.json for the weights' "
        "size) or its config.json",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from-log",
        metavar="LOG",
        help="an earlier boot of this model on these GPUs (SGLang's log file; - for stdin): "
        "calibrates free memory, weights and CUDA graphs per rank",
    )
    source.add_argument(
        "--unit", metavar="UNIT", help="as --from-log, from a systemd unit's journal"
    )
    parser.add_argument(
        "--gpu-memory",
        metavar="GIB|free",
        help="memory of one GPU in GiB when NVML shows none here (e.g. 80 for an H100 80GB; "
        f"from {MIN_GPU_GIB} to {MAX_GPU_GIB}); free: the free memory NVML measures now on "
        "the GPU with the least (what other processes hold is left out)",
    )
    parser.add_argument(
        "--gpu-name",
        metavar="NAME",
        help="the GPU's name when NVML cannot tell it (e.g. MI300X, GB10, Ascend 910B): picks "
        "what the platform takes before the weights (docs/plan.md)",
    )
    parser.add_argument(
        "--sglang-version",
        metavar="V",
        help="the SGLang version whose rules apply (default: the log's, the installed sglang's)",
    )
    parser.add_argument(
        "--weights-gib",
        metavar="GIB",
        type=float,
        help="the checkpoint's size in GiB, all ranks together (default: "
        "model.safetensors.index.json, else estimated from config.json)",
    )
    parser.add_argument(
        "--safe-margin",
        metavar="GIB",
        type=float,
        default=SAFE_HEADROOM_GIB,
        help="free GiB per GPU after startup under which the verdict is an OOM risk (default: "
        f"{SAFE_HEADROOM_GIB:g}, the low end of SGLang's advice of 5 to 8)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (schema kvtop-plan/1)")
    parser.add_argument(
        "--width",
        metavar="N",
        type=int,
        help="the text's width in columns (default: the terminal's, $COLUMNS, 80 on a pipe)",
    )
    return parser


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    words = list(argv)
    if "--" in words:
        at = words.index("--")
        return words[:at], words[at + 1 :]
    return words, []


def _say(text: str) -> None:
    print(f"kvtop plan: {text}", file=sys.stderr)


def _version(override: str | None, calib: Calibration | None) -> tuple[tuple[int, ...] | None, str]:
    if override:
        return parse_version(override), "given"
    if calib is not None and calib.version is not None:
        return calib.version, "log"
    installed = installed_sglang()
    if installed:
        return parse_version(installed), "installed sglang"
    return None, "assumed"


def main_plan(argv: Sequence[str]) -> int:
    """`kvtop plan`; Ctrl-C (a FIFO no one writes, a slow journal) ends it with one line and
    130, as kvtop's other one-shot commands."""
    try:
        return _main_plan(argv)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError):
            _say("interrupted before the plan was ready; nothing was printed.")
        return EXIT_INTERRUPTED


def _main_plan(argv: Sequence[str]) -> int:
    parser = build_parser()
    ours, theirs = _split(argv)
    try:
        opts = parser.parse_args(ours)
    except SystemExit as exc:
        return int(exc.code or 0)
    problem = first_problem(opts, PLAN)
    if problem is not None:
        return refuse(parser, problem, prog="kvtop plan")
    gpu_gib = gpu_memory_gib(opts.gpu_memory)[0]
    try:
        given = parse_launch_args(theirs)
    except LaunchArgsError as exc:
        _say(str(exc))
        return EXIT_USAGE
    try:
        model: ModelInfo | None = read_model(opts.model, opts.weights_gib) if opts.model else None
        calib = None
        if opts.from_log or opts.unit:
            startup = read_boot(opts.from_log, opts.unit)
            calib = calibration_of(startup, opts.sglang_version)
    except (GatherError, CalibrationError) as exc:
        _say(str(exc))
        return EXIT_UNREADABLE
    given_tp = given.values.get("tp_size")
    if calib is not None and not calib.tp_size_logged and isinstance(given_tp, int) and given_tp:
        # The log does not say its TP (no server_args): the one given is taken as the boot's.
        calib = replace(calib, tp_size=given_tp)
    seen = {"tp_size": calib.tp_size} if calib is not None else None
    args = merge_launch_args(given, calib.server_args if calib else None, seen)
    gpus: Gpus | None
    if gpu_gib is not None:
        gpus = Gpus(args.tp * args.pp, gpu_gib * 1024, opts.gpu_name, "--gpu-memory")
    else:
        gpus, why = read_gpus(measure_free=opts.gpu_memory == FREE_NOW)
        if gpus is None and opts.gpu_memory == FREE_NOW:
            _say(
                f"--gpu-memory free measures the free memory with NVML, and NVML shows no GPU "
                f"here ({why}): give --gpu-memory GIB, one GPU's memory"
            )
            return EXIT_UNREADABLE
        if gpus is not None and opts.gpu_name and gpus.name is None:
            gpus = replace(gpus, name=opts.gpu_name)
    shape_problem = launch_shape_problem(args)
    if shape_problem is not None:
        _say(shape_problem)
        return EXIT_USAGE
    version, version_source = _version(opts.sglang_version, calib)
    try:
        built = build(model, calib, args, gpus, version, version_source)
        planner = replace(built.planner, safe_margin_gib=opts.safe_margin)
        built = replace(built, planner=planner)
        result = built.planner.at(built.mem_fraction_static)
    except PlanInputError as exc:
        _say(str(exc))
        return EXIT_UNREADABLE
    ctx = PlanContext(
        built=built,
        result=result,
        args=args,
        model=model,
        gpus=gpus,
        calibrated_from=(opts.from_log if opts.from_log else f"unit {opts.unit}")
        if calib is not None
        else None,
        calibration_rank=calib.reference_rank if calib else None,
        width=opts.width,
        ascii=not takes_unicode(sys.stdout),
    )
    if opts.json:
        write_json(plan_json(ctx))
    else:
        sys.stdout.write(plan_text(ctx))
    return EXIT_BY_VERDICT[result.verdict.kind]
