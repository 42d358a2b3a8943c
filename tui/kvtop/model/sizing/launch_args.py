"""SGLang launch_server arguments (the words after `kvtop plan --`) as the sizing reads them.

Only the arguments that change the KV sizing are read and checked; a bad value of one of them
is refused with a sentence (LaunchArgsError). Every other word is checked as SGLang's own
argparse checks it, against the flags of the SGLang release kvtop knows
(sglang_launch_flags.py, written by scripts/sglang_flags.py): a flag of SGLang
that kvtop does not model is kept by name and listed as not modelled (a launch line copied
whole must still plan); a unique prefix of one flag stands for it (argparse's allow_abbrev); an
ambiguous prefix or a word that is no flag of SGLang is refused, as SGLang would refuse to start.
Arguments not given are taken from an earlier boot's server_args (the calibration log), then
from SGLang's own defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kvtop.model.sizing import sglang_launch_flags
from kvtop.model.sizing.formula import canonical_dtype

# Bounds on the launch's shape. A host has 8 or 16 GPUs and the largest deployments a few
# thousand; beyond these a TP or PP size is a typo, and the plan (a line per rank) would print
# and compute without end.
MAX_TP_SIZE = 1024
MAX_PP_SIZE = 256
MAX_DP_SIZE = 1024
MAX_EP_SIZE = 1024
MAX_RANKS = 4096  # TP × PP: GPUs one model instance spans
# SGLang refuses a context beyond the model's own unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN
# is set; 100 million tokens is far past any model's.
MAX_CONTEXT_LENGTH = 100_000_000
# Tokens, requests, batch sizes: far beyond any GPU's pool, and below 2^53 so that the sizing's
# float arithmetic stays exact.
MAX_COUNT = 10**12
# SGLang's pool ratios are around 1 (0.8 SWA, 0.9 Mamba).
MAX_RATIO = 1000.0
# How many candidates an ambiguous prefix names (argparse names all; `--enable` has a hundred).
_MAX_NAMED = 6


class LaunchArgsError(ValueError):
    """A launch argument kvtop plan needs is malformed; the message says which and why."""


def _int_at_least(low: int, high: int = MAX_COUNT, why: str = "") -> Callable[[str], int]:
    def convert(text: str) -> int:
        if len(text.strip()) > 20:  # int() of a long word takes time; no bound has 20 digits
            raise ValueError(f"must be a whole number from {low} to {high:,}{why}")
        value = int(text)
        if value < low:
            raise ValueError(f"must be a whole number ≥ {low}")
        if value > high:
            raise ValueError(f"must be at most {high:,}{why}")
        return value

    return convert


_GPUS_WHY = ": no SGLang launch spans more GPUs"


def _fraction(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 < value < 1):
        raise ValueError("must be a fraction between 0 and 1, such as 0.88")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 < value <= MAX_RATIO):
        raise ValueError(f"must be a number above 0 and at most {MAX_RATIO:g}")
    return value


def _gib_offloaded(text: str) -> float:
    value = float(text)
    # Weights held in host RAM per GPU; 4096 GiB is past any host's memory.
    if not (math.isfinite(value) and 0 <= value <= 4096):
        raise ValueError("must be GiB of weights kept in host RAM per GPU, from 0 to 4096")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text.lower() not in {c.lower() for c in choices}:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return next(c for c in choices if c.lower() == text.lower())

    return convert


def _chunked(text: str) -> int:
    if text.strip() == "-1":
        return -1
    try:
        return _int_at_least(1)(text)
    except ValueError as exc:
        if str(exc).startswith("invalid literal"):
            raise
        raise ValueError(
            f"must be a whole number from 1 to {MAX_COUNT:,}, or -1 (chunked prefill off)"
        ) from None


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


KV_CACHE_DTYPES = (
    "auto",
    "fp8_e5m2",
    "fp8_e4m3",
    "bf16",
    "bfloat16",
    "fp16",
    "float16",
    "fp4_e2m1",
)
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
SPECULATIVE = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "FROZEN_KV_MTP")

# dest -> (converter, flag spellings). Boolean flags have converter None.
_VALUED: dict[str, tuple[Callable[[str], object], tuple[str, ...]]] = {
    "model_path": (_text, ("--model-path", "--model")),
    # `--tp` and `--dp` are prefixes of --tp-size and --dp-size (argparse's allow_abbrev).
    "tp_size": (
        _int_at_least(1, MAX_TP_SIZE, _GPUS_WHY),
        ("--tp-size", "--tensor-parallel-size"),
    ),
    "dp_size": (
        _int_at_least(1, MAX_DP_SIZE, _GPUS_WHY),
        ("--dp-size", "--data-parallel-size"),
    ),
    "pp_size": (
        _int_at_least(1, MAX_PP_SIZE, _GPUS_WHY),
        ("--pp-size", "--pipeline-parallel-size"),
    ),
    "ep_size": (
        _int_at_least(1, MAX_EP_SIZE, _GPUS_WHY),
        ("--ep-size", "--expert-parallel-size", "--ep"),
    ),
    "mem_fraction_static": (_fraction, ("--mem-fraction-static",)),
    "kv_cache_dtype": (_choice(*KV_CACHE_DTYPES), ("--kv-cache-dtype",)),
    "dtype": (_choice(*MODEL_DTYPES), ("--dtype",)),
    "page_size": (_int_at_least(1), ("--page-size",)),
    "context_length": (
        _int_at_least(1, MAX_CONTEXT_LENGTH, " tokens, far past any model's context"),
        ("--context-length",),
    ),
    "max_total_tokens": (_int_at_least(1), ("--max-total-tokens",)),
    "max_running_requests": (_int_at_least(1), ("--max-running-requests",)),
    "chunked_prefill_size": (_chunked, ("--chunked-prefill-size",)),
    # --cuda-graph-max-bs until SGLang 0.5.22; from 0.5.23 the decode graphs' own flag (the
    # batch sizes SGLang's graph reserve counts).
    "cuda_graph_max_bs": (
        _int_at_least(1),
        ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ),
    "speculative_algorithm": (_choice(*SPECULATIVE), ("--speculative-algorithm",)),
    "speculative_draft_model_path": (
        _text,
        ("--speculative-draft-model-path", "--speculative-draft-model"),
    ),
    "speculative_num_steps": (_int_at_least(0), ("--speculative-num-steps",)),
    "speculative_eagle_topk": (_int_at_least(1), ("--speculative-eagle-topk",)),
    "speculative_num_draft_tokens": (_int_at_least(1), ("--speculative-num-draft-tokens",)),
    "swa_full_tokens_ratio": (_positive_float, ("--swa-full-tokens-ratio",)),
    "mamba_full_memory_ratio": (_positive_float, ("--mamba-full-memory-ratio",)),
    "max_mamba_cache_size": (_int_at_least(1), ("--max-mamba-cache-size",)),
    "cpu_offload_gb": (_gib_offloaded, ("--cpu-offload-gb",)),
    "mamba_ssm_dtype": (_choice("float32", "bfloat16", "float16"), ("--mamba-ssm-dtype",)),
    "moe_a2a_backend": (_text, ("--moe-a2a-backend",)),
    "moe_dense_tp_size": (_int_at_least(1), ("--moe-dense-tp-size",)),
    "disaggregation_mode": (_choice("null", "prefill", "decode"), ("--disaggregation-mode",)),
}
_FLAGS: dict[str, tuple[str, ...]] = {
    "enable_dp_attention": ("--enable-dp-attention",),
    "disable_cuda_graph": ("--disable-cuda-graph",),
    "disable_radix_cache": ("--disable-radix-cache",),
    "disable_hybrid_swa_memory": ("--disable-hybrid-swa-memory",),
    "enable_dp_lm_head": ("--enable-dp-lm-head",),
}
_BY_FLAG: dict[str, str] = {
    spelling: dest for dest, (_, spellings) in _VALUED.items() for spelling in spellings
} | {spelling: dest for dest, spellings in _FLAGS.items() for spelling in spellings}


@dataclass(frozen=True, slots=True)
class GivenArgs:
    """What the words after `--` said: the values read, and the flags left unmodelled."""

    values: Mapping[str, object]
    ignored: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SglangFlags:
    """SGLang's launch_server flags in its parser's order, each with what it takes: `switch`
    (nothing), `value` (one word), `values` (the words up to the next flag), `optional`."""

    version: str
    kinds: Mapping[str, str]


def sglang_flags() -> SglangFlags:
    """SGLang's flags (sglang_launch_flags.py, generated from its wheel by
    scripts/sglang_flags.py)."""
    return _SGLANG_FLAGS


_SGLANG_FLAGS = SglangFlags(sglang_launch_flags.VERSION, sglang_launch_flags.FLAGS)


def _resolve(flag: str) -> str:
    """The flag a word names, as SGLang's argparse reads it: itself when it is a flag (of SGLang,
    or one kvtop reads from an earlier release), else the one flag it is a prefix of."""
    known = sglang_flags()
    if flag in known.kinds or flag in _BY_FLAG:
        return flag
    if flag == "--":
        raise LaunchArgsError(
            "a second `--` among the SGLang arguments: SGLang's launch_server takes only flags"
        )
    matches = [f for f in known.kinds if f.startswith(flag)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        named = ", ".join(matches[:_MAX_NAMED])
        if len(matches) > _MAX_NAMED:
            named += f", … ({len(matches)} flags)"
        raise LaunchArgsError(
            f"ambiguous option: {flag} could match {named}: SGLang {known.version} refuses it "
            "too; spell the flag out"
        )
    raise LaunchArgsError(
        f"unrecognized SGLang argument {flag} (not a launch_server flag of SGLang "
        f"{known.version}): SGLang would refuse to start; check the spelling"
    )


def _kind(flag: str, dest: str | None) -> str:
    if dest in _FLAGS:
        return "switch"
    if dest in _VALUED:
        return "value"
    return sglang_flags().kinds.get(flag, "value")


def parse_launch_args(words: Sequence[str]) -> GivenArgs:
    """`--tp-size 8 --mem-fraction-static=0.9 --enable-dp-attention ...` → values by name."""
    values: dict[str, object] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise LaunchArgsError(
                f"SGLang argument {word!r} is not a --flag: give the launch_server arguments "
                "after `--`, e.g. kvtop plan --model DIR -- --tp-size 8"
            )
        given, eq, inline = word.partition("=")
        # kvtop reads `--tp_size` as `--tp-size`, the spelling of SGLang's logged server_args.
        flag = _resolve(given.replace("_", "-") if given != "--" else given)
        dest = _BY_FLAG.get(flag)
        kind = _kind(flag, dest)
        i += 1
        if kind == "switch":
            value = _bool_value(flag, inline) if eq else True
            if dest is not None:
                values[dest] = value
            else:
                ignored.append(flag)
            continue
        if eq:
            raw: str | None = inline
        elif kind in ("value", "values") and (i >= len(words) or words[i].startswith("--")):
            raise LaunchArgsError(
                f"SGLang argument {flag} needs a value (e.g. {flag} {_example(dest)})"
            )
        elif i < len(words) and not words[i].startswith("--"):
            raw = words[i]
            i += 1
        else:
            raw = None  # an optional value not given
        if kind == "values":
            # nargs "+"/"*": every word up to the next flag.
            while i < len(words) and not words[i].startswith("--"):
                i += 1
        if dest is None or raw is None:
            ignored.append(flag)
            continue
        convert, _ = _VALUED[dest]
        try:
            values[dest] = convert(raw)
        except ValueError as exc:
            why = str(exc)
            if why.startswith(("invalid literal", "could not convert")):
                why = "is not a number"
            raise LaunchArgsError(f"SGLang argument {flag} {raw!r}: {why}") from None
    return GivenArgs(values, tuple(dict.fromkeys(ignored)))


def launch_shape_problem(args: LaunchArgs) -> str | None:
    """A launch no cluster runs (TP × PP past MAX_RANKS, DP attention over more ranks than
    TP), in one sentence; None when the shape is one SGLang could start."""
    tp, pp, dp = args.tp, args.pp, args.dp
    if tp * pp > MAX_RANKS:
        return (
            f"--tp-size {tp} × --pp-size {pp} is {tp * pp:,} GPUs for one model, more than "
            f"any cluster gives one SGLang launch: TP × PP must be at most {MAX_RANKS:,}"
        )
    if args.flag("enable_dp_attention") and dp > tp:
        return (
            f"--dp-size {dp} with --enable-dp-attention splits the attention of --tp-size {tp} "
            f"ranks: DP must be at most TP ({tp})"
        )
    return None


def _bool_value(flag: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise LaunchArgsError(f"SGLang argument {flag}={text!r}: must be true or false")


def _example(dest: str | None) -> str:
    return {"mem_fraction_static": "0.88", "kv_cache_dtype": "fp8_e4m3"}.get(dest or "", "8")


@dataclass(frozen=True, slots=True)
class LaunchArgs:
    """The launch as the sizing sees it: given, else logged, else SGLang's default."""

    values: Mapping[str, object]
    given: frozenset[str]  # names given after `--`
    logged: frozenset[str]  # names taken from the calibration log's server_args
    ignored: tuple[str, ...]

    def get(self, name: str) -> object:
        return self.values.get(name)

    def int_of(self, name: str, default: int | None = None) -> int | None:
        value = self.values.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return default
        return int(value) if float(value).is_integer() else default

    def float_of(self, name: str) -> float | None:
        value = self.values.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    def str_of(self, name: str) -> str | None:
        value = self.values.get(name)
        if not isinstance(value, str) or value.lower() in ("none", "null", ""):
            return None
        return value

    def flag(self, name: str) -> bool:
        return self.values.get(name) is True

    @property
    def tp(self) -> int:
        return self.int_of("tp_size", 1) or 1

    @property
    def dp(self) -> int:
        return self.int_of("dp_size", 1) or 1

    @property
    def pp(self) -> int:
        return self.int_of("pp_size", 1) or 1

    @property
    def attn_tp(self) -> int:
        """GPUs one attention layer's KV heads are split over (TP / DP with DP attention)."""
        return max(1, self.tp // self.dp) if self.flag("enable_dp_attention") else self.tp

    @property
    def attn_dp(self) -> int:
        return self.dp if self.flag("enable_dp_attention") else 1

    @property
    def speculative(self) -> str | None:
        algo = self.str_of("speculative_algorithm")
        return algo.upper() if algo else None

    def source_of(self, name: str) -> str | None:
        if name in self.given:
            return "given"
        if name in self.logged:
            return "log"
        return None


def merge_launch_args(
    given: GivenArgs,
    logged: Mapping[str, object] | None,
    seen: Mapping[str, object] | None = None,
) -> LaunchArgs:
    """Given values over the log's server_args (kept only where the value reads as the type),
    over what the log shows without a server_args line (`seen`: its ranks' TP size)."""
    values: dict[str, object] = dict(seen or {})
    logged_names: set[str] = set(values)
    for name, value in (logged or {}).items():
        clean = _from_log(name, value)
        if clean is not None:
            values[name] = clean
            logged_names.add(name)
    values.update(given.values)
    return LaunchArgs(
        values, frozenset(given.values), frozenset(logged_names - set(given.values)), given.ignored
    )


def _from_log(name: str, value: object) -> object | None:
    """A logged server_args value checked as the flag would be (None: not usable)."""
    if value is None:
        return None
    if name in _FLAGS:
        return value if isinstance(value, bool) else None
    if name not in _VALUED:
        return value if isinstance(value, bool | int | float | str) else None
    convert, _ = _VALUED[name]
    text = value if isinstance(value, str) else repr(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and name not in ("mem_fraction_static",):
        text = str(int(value))
    try:
        return convert(text)
    except ValueError:
        return None


def kv_dtype_name(value: str | None) -> str | None:
    """The torch name of a --kv-cache-dtype value ("auto" stays None: the model decides)."""
    if value is None or value.lower() == "auto":
        return None
    return canonical_dtype(value)
