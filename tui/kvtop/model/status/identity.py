"""Is every source about the same server? What the log, /server_info and /metrics say it is.

The log's latest start (the StartupTracker's current one) is the reference: each server source
is compared with it, fact by fact, and each difference is one `Mismatch`. Nothing is invented:
a fact missing on either side is not compared, a name is compared loosely (see `_names_agree`)
and a version the log only narrows down to a range disagrees only outside that range.

`Mismatch.field`, in operator words (JSON `mismatches[].field`):
- "model": --served-model-name / --model-path (metrics: the `model_name` label).
- "tp_size", "dp_size", "pp_size": the parallel sizes. Metrics carry no sizes, only rank labels
  of the schedulers that publish, so there the value is the highest rank label + 1, a lower
  bound compared only when the log's size is smaller ("TP ≥16").
- "max_total_num_tokens": the KV pool of one DP group in tokens (the log's summary line; the
  pool of each DP group in metrics, which sum them; /server_info's rank 0 and token_capacity).
- "context_length": the context length (metrics and the summary line: the one in force;
  /server_info: --context-length, compared with the log's, else with the summary line's).
- "port": --port (/server_info).
- "sglang_version": /server_info's version against the range the log's formats allow.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtop.model.mismatch import Mismatch
from kvtop.model.sizing.formula import parse_version
from kvtop.sglang.metrics import MetricsSample, ServerInfo
from kvtop.sglang.server_args import ServerArgs
from kvtop.sglang.start_state import Startup
from kvtop.sglang.version_hint import NEWEST, OLDEST

METRICS, SERVER_INFO = "metrics", "server_info"
MODEL, TP_SIZE, DP_SIZE, PP_SIZE = "model", "tp_size", "dp_size", "pp_size"
MAX_TOTAL_NUM_TOKENS, CONTEXT_LENGTH = "max_total_num_tokens", "context_length"
PORT, SGLANG_VERSION = "port", "sglang_version"
# Fields whose metrics value is a lower bound (highest rank label + 1).
_LOWER_BOUNDS = frozenset({TP_SIZE, DP_SIZE, PP_SIZE})


# --------------------------------------------------------------------------------------------
# names


def _norm(name: str) -> str:
    """A model name or path as compared: no surrounding blanks or trailing slashes, any case."""
    stripped = name.strip()
    return (stripped.rstrip("/") or stripped).casefold()


def _last(name: str) -> str:
    return _norm(name).rsplit("/", 1)[-1]


def _names_agree(a: str, b: str) -> bool:
    """Equal, or one is the last component of the other (a served name for a model path:
    "Kimi-K2.5" for "/models/Kimi-K2.5/" or "moonshotai/Kimi-K2.5")."""
    na, nb = _norm(a), _norm(b)
    return na == nb or _last(a) == nb or na == _last(b)


def _any_agree(ours: Iterable[str], theirs: Iterable[str]) -> bool:
    theirs = tuple(theirs)
    return any(_names_agree(a, b) for a in ours for b in theirs)


def _log_names(startup: Startup) -> tuple[str, ...]:
    args = startup.server_args
    if args is None:
        return ()
    return tuple(n for n in (args.served_model_name, args.model_path) if n)


# --------------------------------------------------------------------------------------------
# comparisons


def _known(value: int | None) -> int | None:
    """A size or count that can be compared: 0 is what a gauge reads before it is set."""
    return value if value else None


def _pool_mismatch(log: int | None, server: Iterable[int | None], source: str) -> list[Mismatch]:
    """The log's pool of one DP group against the pools the server gives (one per DP group)."""
    candidates = [v for v in server if _known(v) is not None]
    if _known(log) is None or not candidates or log in candidates:
        return []
    return [Mismatch(MAX_TOTAL_NUM_TOKENS, log, candidates[0], source)]


def _equal_or_unknown(name: str, log: object, server: object, source: str) -> list[Mismatch]:
    if log is None or server is None or log == server:
        return []
    return [Mismatch(name, log, server, source)]


def metrics_mismatches(startup: Startup, metrics: MetricsSample | None) -> tuple[Mismatch, ...]:
    """What /metrics says against the log's latest start."""
    if metrics is None:
        return ()
    found: list[Mismatch] = []
    logged = _log_names(startup)
    if logged and metrics.model_names and not _any_agree(logged, metrics.model_names):
        found.append(Mismatch(MODEL, logged[0], ", ".join(metrics.model_names), METRICS))
    args = startup.server_args
    if args is not None:
        for name, size, highest in (
            (TP_SIZE, args.tp_size, metrics.highest_tp_rank),
            (DP_SIZE, args.dp_size, metrics.highest_dp_rank),
            (PP_SIZE, args.pp_size, metrics.highest_pp_rank),
        ):
            if size is not None and highest is not None and highest + 1 > size:
                found.append(Mismatch(name, size, highest + 1, METRICS))
    summary = startup.summary
    if summary is not None:
        found += _pool_mismatch(
            summary.max_total_num_tokens, metrics.max_total_num_tokens_by_dp, METRICS
        )
        found += _equal_or_unknown(
            CONTEXT_LENGTH, _known(summary.context_len), _known(metrics.context_len), METRICS
        )
    return tuple(found)


def _version_mismatch(startup: Startup, version: str | None) -> list[Mismatch]:
    """The server's version against the range the log's formats allow (unknown: no check)."""
    hint = startup.version
    parsed = parse_version(version) if version else None
    if parsed is None or not hint.known:
        return []
    triple = (*parsed, 0, 0, 0)[:3]
    # OLDEST and NEWEST stand for "no bound": a log of the newest formats allows 1.0 too.
    if (hint.low == OLDEST or hint.low <= triple) and (hint.high == NEWEST or triple <= hint.high):
        return []
    return [Mismatch(SGLANG_VERSION, hint.text(), version, SERVER_INFO)]


def _info_args_mismatches(startup: Startup, info: ServerInfo) -> list[Mismatch]:
    ours, theirs = startup.server_args, info.server_args
    if theirs is None:
        return []
    found: list[Mismatch] = []
    logged = _log_names(startup)
    served = tuple(n for n in (theirs.served_model_name, theirs.model_path) if n)
    if logged and served and not _any_agree(logged, served):
        found.append(Mismatch(MODEL, logged[0], served[0], SERVER_INFO))
    if ours is not None:
        for name in (TP_SIZE, DP_SIZE, PP_SIZE):
            found += _equal_or_unknown(
                name, getattr(ours, name), getattr(theirs, name), SERVER_INFO
            )
    return found


def server_info_mismatches(startup: Startup, info: ServerInfo | None) -> tuple[Mismatch, ...]:
    """What /server_info says against the log's latest start."""
    if info is None:
        return ()
    found = _info_args_mismatches(startup, info)
    summary = startup.summary
    if summary is not None:
        pools = (info.max_total_num_tokens, *(m.token_capacity for m in info.memory_by_dp))
        found += _pool_mismatch(summary.max_total_num_tokens, pools, SERVER_INFO)
    ours, theirs = startup.server_args, info.server_args
    if theirs is not None:
        logged_context = ours.context_length if ours is not None else None
        if logged_context is None and summary is not None:
            logged_context = summary.context_len
        found += _equal_or_unknown(
            CONTEXT_LENGTH, _known(logged_context), _known(theirs.context_length), SERVER_INFO
        )
        found += _equal_or_unknown(
            PORT, ours.port if ours is not None else None, theirs.port, SERVER_INFO
        )
    found += _version_mismatch(startup, info.version)
    return tuple(found)


def find_mismatches(
    startup: Startup, metrics: MetricsSample | None, info: ServerInfo | None
) -> tuple[Mismatch, ...]:
    """Every disagreement between the log's latest start and the server sources (metrics
    first), empty when they agree or have nothing in common to compare."""
    return metrics_mismatches(startup, metrics) + server_info_mismatches(startup, info)


# Every field a Mismatch can name, in the order above (`kvtop --export`'s kvtop_mismatch{field}).
FIELDS = (
    MODEL,
    TP_SIZE,
    DP_SIZE,
    PP_SIZE,
    MAX_TOTAL_NUM_TOKENS,
    CONTEXT_LENGTH,
    PORT,
    SGLANG_VERSION,
)


def _metrics_compared(startup: Startup, metrics: MetricsSample) -> set[str]:
    """The fields metrics_mismatches compares: both sides known."""
    found = set()
    if _log_names(startup) and metrics.model_names:
        found.add(MODEL)
    args = startup.server_args
    if args is not None:
        for name, size, highest in (
            (TP_SIZE, args.tp_size, metrics.highest_tp_rank),
            (DP_SIZE, args.dp_size, metrics.highest_dp_rank),
            (PP_SIZE, args.pp_size, metrics.highest_pp_rank),
        ):
            if size is not None and highest is not None:
                found.add(name)
    summary = startup.summary
    if summary is not None:
        if _known(summary.max_total_num_tokens) and any(
            _known(v) for v in metrics.max_total_num_tokens_by_dp
        ):
            found.add(MAX_TOTAL_NUM_TOKENS)
        if _known(summary.context_len) and _known(metrics.context_len):
            found.add(CONTEXT_LENGTH)
    return found


def _info_args_compared(startup: Startup, theirs: ServerArgs) -> set[str]:
    """The server_args fields server_info_mismatches compares: both sides known."""
    found = set()
    ours, summary = startup.server_args, startup.summary
    if _log_names(startup) and (theirs.served_model_name or theirs.model_path):
        found.add(MODEL)
    if ours is not None:
        found |= {
            n
            for n in (TP_SIZE, DP_SIZE, PP_SIZE)
            if None not in (getattr(ours, n), getattr(theirs, n))
        }
        if ours.port is not None and theirs.port is not None:
            found.add(PORT)
    logged_context = ours.context_length if ours is not None else None
    if logged_context is None and summary is not None:
        logged_context = summary.context_len
    if _known(logged_context) and _known(theirs.context_length):
        found.add(CONTEXT_LENGTH)
    return found


def _info_compared(startup: Startup, info: ServerInfo) -> set[str]:
    """The fields server_info_mismatches compares: both sides known."""
    found = set() if info.server_args is None else _info_args_compared(startup, info.server_args)
    summary = startup.summary
    pools = (info.max_total_num_tokens, *(m.token_capacity for m in info.memory_by_dp))
    if summary is not None and _known(summary.max_total_num_tokens) and any(map(_known, pools)):
        found.add(MAX_TOTAL_NUM_TOKENS)
    if info.version and parse_version(info.version) is not None and startup.version.known:
        found.add(SGLANG_VERSION)
    return found


def compared_fields(
    startup: Startup, metrics: MetricsSample | None, info: ServerInfo | None
) -> frozenset[str]:
    """The fields find_mismatches could compare (known on both sides, by either source): a
    field in none of its Mismatches agrees; a field not here was not compared."""
    found: set[str] = set()
    if metrics is not None:
        found |= _metrics_compared(startup, metrics)
    if info is not None:
        found |= _info_compared(startup, info)
    return frozenset(found)


# --------------------------------------------------------------------------------------------
# words


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _said(m: Mismatch, value: object, bound: bool) -> str:
    """One value as an operator reads it: "glm-5.3-flash", "655,360 tokens", "TP 8"."""
    at_least = " ≥" if bound else " "
    if m.field == MODEL:
        return str(value)
    if m.field == MAX_TOTAL_NUM_TOKENS:
        return f"{_count(value)} tokens"
    if m.field in _LOWER_BOUNDS:
        return f"{m.field[:2].upper()}{at_least}{value}"
    if m.field == CONTEXT_LENGTH:
        return f"context {_count(value)}"
    if m.field == PORT:
        return f"port {value}"
    if m.field == SGLANG_VERSION:
        return f"SGLang {value}"
    return f"{m.field} {_count(value)}"


def mismatch_text(mismatches: tuple[Mismatch, ...] | list[Mismatch]) -> tuple[str, ...]:
    """One sentence per server source that disagrees with the log, naming each difference:
    "metrics say glm-5.3-flash, 655,360 tokens; the log says Kimi-K2.5, 158,616 tokens: …"."""
    sentences = []
    for source in (METRICS, SERVER_INFO):
        mine = [m for m in mismatches if m.source == source]
        if not mine:
            continue
        says = "metrics say" if source == METRICS else "/server_info says"
        bound = source == METRICS
        theirs = ", ".join(_said(m, m.server, bound and m.field in _LOWER_BOUNDS) for m in mine)
        logged = ", ".join(_said(m, m.log, False) for m in mine)
        sentences.append(
            f"{says} {theirs}; the log says {logged}: another server's numbers, not shown as "
            "this server's. Check --url (or that the log is this server's)."
        )
    return tuple(sentences)
