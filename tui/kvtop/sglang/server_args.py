"""Parse SGLang's startup ``server_args=...`` log line (repr or dict form) into typed fields."""

from __future__ import annotations

import ast
import math
import re
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kvtop.sglang.control_chars import make_visible

__all__ = ["ServerArgs", "parse_server_args", "redact_line", "server_args_from_mapping"]

REDACTED: Final = "<redacted>"

# Keys whose values are secrets: never kept, not even in ``raw``.
_SECRET_KEYS: Final = frozenset({"api_key", "admin_api_key", "hf_token", "ssl_keyfile_password"})
_SECRET_SUFFIXES: Final = ("_api_key", "_password", "_secret")

_PREFIX_RE: Final = re.compile(r"\s*server_args\s*=\s*")
# ``ServerArgs(`` (any dotted class name) at the start of the repr form.
_REPR_HEAD_RE: Final = re.compile(r"[A-Za-z_][\w.]*\(")
# Characters the top-level scanner has to look at; everything else is skipped in one regex step.
_SPECIAL_RE: Final = re.compile(r"""['"()\[\]{},]""")
_STRING_STOP_RE: Final = {"'": re.compile(r"[\\']"), '"': re.compile(r'[\\"]')}
_OPENER_OF: Final = {")": "(", "]": "[", "}": "{"}
# Only values starting like a Python literal go to ast.literal_eval (non-literal reprs such as
# ``PosixPath('/x')`` or ``<LoadFormat.AUTO: 'auto'>`` are kept as their source text).
_LITERAL_START: Final = frozenset("'\"0123456789-+.([{")
_PLAIN_INT_RE: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
_NAMED_LITERALS: Final[Mapping[str, object]] = {
    "None": None,
    "True": True,
    "False": False,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
}
# ``<Enum.MEMBER: value>`` and ``PosixPath('/x')`` reprs, unwrapped for the typed string fields.
_ENUM_REPR_RE: Final = re.compile(r"<[A-Za-z_][\w.]*\.([A-Za-z_]\w*): (.*)>")
_PATH_REPR_RE: Final = re.compile(r"(?:Posix|Windows|PurePosix|PureWindows)?Path\((.*)\)")
_LITERAL_EVAL_ERRORS: Final = (
    ValueError,
    TypeError,
    SyntaxError,
    MemoryError,  # "Parser stack overflowed" on absurdly nested input
    RecursionError,
    OverflowError,
)


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """SGLang server arguments as logged at startup (or served by ``/server_info``)."""

    raw: Mapping[str, object] = field(hash=False)
    form: str
    truncated: bool
    model_path: str | None = None
    served_model_name: str | None = None
    tokenizer_path: str | None = None
    mem_fraction_static: float | None = None
    tp_size: int | None = None
    dp_size: int | None = None
    pp_size: int | None = None
    ep_size: int | None = None
    attn_cp_size: int | None = None
    moe_dp_size: int | None = None
    enable_dp_attention: bool | None = None
    page_size: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    context_length: int | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    # How much of each request's max_new_tokens the scheduler reserves before admitting more
    # (default 1.0): higher retracts less, lower admits more.
    schedule_conservativeness: float | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    enable_hierarchical_cache: bool | None = None
    hicache_ratio: float | None = None
    hicache_size: float | None = None
    hicache_mem_layout: str | None = None
    hicache_io_backend: str | None = None
    hicache_storage_backend: str | None = None
    enable_metrics: bool | None = None
    host: str | None = None
    port: int | None = None
    base_gpu_id: int | None = None
    # Deployment shape (tui/kvtop/model/deployment_shape.py): nodes, this node's rank, PD role.
    nnodes: int | None = None
    node_rank: int | None = None
    disaggregation_mode: str | None = None  # "null", "prefill" or "decode", as SGLang logs it
    dist_init_addr: str | None = None
    api_key_set: bool = False
    # Typed fields whose logged value was refused (wrong type, out of range): name -> what was
    # logged and why, e.g. {"mem_fraction_static": "7 (not in (0, 1])"}. The field itself is None.
    rejected: Mapping[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, object]:
        """The typed fields (not ``raw``, ``form`` or ``truncated``) as a JSON-safe dict."""
        data: dict[str, object] = {name: getattr(self, name) for name in _TYPED_FIELD_NAMES}
        data["rejected"] = dict(self.rejected)
        return data


# --------------------------------------------------------------------------------------------
# value coercion for the typed fields: wrong type / out of range -> None, never an exception


def _to_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 40:
            return None
        try:
            return int(text)
        except ValueError:
            return _to_int(_to_float(text))
    return None


def _to_float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 40:
            return None
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _int_at_least(minimum: int) -> Callable[[object], int | None]:
    def convert(value: object) -> int | None:
        number = _to_int(value)
        return number if number is not None and number >= minimum else None

    return convert


def _float_at_least_zero(value: object) -> float | None:
    number = _to_float(value)
    return number if number is not None and number >= 0 else None


def _fraction(value: object) -> float | None:
    number = _to_float(value)
    return number if number is not None and 0 < number <= 1 else None


def _port(value: object) -> int | None:
    number = _to_int(value)
    return number if number is not None and 0 < number < 65536 else None


def _chunked_prefill_size(value: object) -> int | None:
    # -1 is SGLang's "chunked prefill disabled"; other non-positive values are invalid.
    number = _to_int(value)
    return number if number is not None and (number > 0 or number == -1) else None


def _to_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
    return None


def _to_str(value: object) -> str | None:
    """A typed string field, decoded (an enum's or a path's repr unwrapped) and then filtered:
    a repr's `\\x1b` becomes an escape only here, after the log line's own filter ran."""
    text = _decoded_str(value)
    return make_visible(text) if text is not None else None


def _decoded_str(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    if len(value) > 4096:  # a path or a name, never a blob
        return value
    enum = _ENUM_REPR_RE.fullmatch(value)
    if enum is not None:
        inner = _literal_value(enum.group(2))
        return inner if isinstance(inner, str) else enum.group(1)
    path = _PATH_REPR_RE.fullmatch(value)
    if path is not None:
        inner = _literal_value(path.group(1))
        if isinstance(inner, str):
            return inner
    return value


def _disaggregation_mode(value: object) -> str | None:
    # SGLang's DisaggregationMode values; the enum repr (`<DisaggregationMode.PREFILL: 'prefill'>`)
    # unwraps to its value. Anything else is refused rather than shown as a role.
    text = _to_str(value)
    mode = text.strip().lower() if text is not None else None
    return mode if mode in ("null", "prefill", "decode") else None


_positive: Final = _int_at_least(1)
_non_negative: Final = _int_at_least(0)

# (field name, keys tried in order, converter). The first key giving a valid value wins.
_FIELD_SPECS: Final[tuple[tuple[str, tuple[str, ...], Callable[[object], object]], ...]] = (
    ("model_path", ("model_path",), _to_str),
    ("served_model_name", ("served_model_name",), _to_str),
    ("tokenizer_path", ("tokenizer_path",), _to_str),
    ("mem_fraction_static", ("mem_fraction_static",), _fraction),
    ("tp_size", ("tp_size",), _positive),
    ("dp_size", ("dp_size",), _positive),
    ("pp_size", ("pp_size",), _positive),
    ("ep_size", ("ep_size", "moe_ep_size", "expert_parallel_size"), _positive),
    ("attn_cp_size", ("attn_cp_size",), _positive),
    ("moe_dp_size", ("moe_dp_size",), _positive),
    ("enable_dp_attention", ("enable_dp_attention",), _to_bool),
    ("page_size", ("page_size",), _positive),
    ("kv_cache_dtype", ("kv_cache_dtype",), _to_str),
    ("dtype", ("dtype",), _to_str),
    ("context_length", ("context_length",), _positive),
    ("max_total_tokens", ("max_total_tokens",), _positive),
    ("max_running_requests", ("max_running_requests",), _positive),
    ("schedule_conservativeness", ("schedule_conservativeness",), _float_at_least_zero),
    ("chunked_prefill_size", ("chunked_prefill_size",), _chunked_prefill_size),
    ("cuda_graph_max_bs", ("cuda_graph_max_bs",), _positive),
    ("speculative_algorithm", ("speculative_algorithm",), _to_str),
    ("speculative_draft_model_path", ("speculative_draft_model_path",), _to_str),
    ("speculative_num_steps", ("speculative_num_steps",), _positive),
    ("speculative_eagle_topk", ("speculative_eagle_topk",), _positive),
    ("speculative_num_draft_tokens", ("speculative_num_draft_tokens",), _positive),
    ("enable_hierarchical_cache", ("enable_hierarchical_cache",), _to_bool),
    ("hicache_ratio", ("hicache_ratio",), _float_at_least_zero),
    ("hicache_size", ("hicache_size",), _float_at_least_zero),
    ("hicache_mem_layout", ("hicache_mem_layout",), _to_str),
    ("hicache_io_backend", ("hicache_io_backend",), _to_str),
    ("hicache_storage_backend", ("hicache_storage_backend",), _to_str),
    ("enable_metrics", ("enable_metrics",), _to_bool),
    ("host", ("host",), _to_str),
    ("port", ("port",), _port),
    ("base_gpu_id", ("base_gpu_id",), _non_negative),
    ("nnodes", ("nnodes",), _positive),
    ("node_rank", ("node_rank",), _non_negative),
    ("disaggregation_mode", ("disaggregation_mode",), _disaggregation_mode),
    ("dist_init_addr", ("dist_init_addr",), _to_str),
)
_TYPED_FIELD_NAMES: Final = (*(spec[0] for spec in _FIELD_SPECS), "api_key_set")


_WHY_REFUSED: Final[Mapping[Callable[[object], object], str]] = {
    _fraction: "not in (0, 1]",
    _positive: "not a whole number ≥ 1",
    _non_negative: "not a whole number ≥ 0",
    _float_at_least_zero: "not a number ≥ 0",
    _port: "not a port 1-65535",
    _chunked_prefill_size: "not a whole number ≥ 1 or -1",
    _to_bool: "not True or False",
    _to_str: "not a string",
    _disaggregation_mode: "not null, prefill or decode",
}


def _shown(value: object) -> str:
    text = repr(value)
    return make_visible(text if len(text) <= 60 else text[:57] + "...")


def _typed_fields(mapping: Mapping[str, object]) -> dict[str, Any]:
    """The one place that turns a decoded mapping into the typed convenience fields. Any: each
    value has the type of its converter in _FIELD_SPECS, which mypy cannot pair with the field."""
    fields: dict[str, Any] = {}
    rejected: dict[str, str] = {}
    for name, keys, convert in _FIELD_SPECS:
        value = None
        refused: object = None
        for key in keys:
            if key in mapping:
                value = convert(mapping[key])
                if value is not None:
                    break
                if mapping[key] is not None and refused is None:
                    refused = mapping[key]  # None means "not set": only a real value is refused
        fields[name] = value
        if value is None and refused is not None:
            rejected[name] = f"{_shown(refused)} ({_WHY_REFUSED.get(convert, 'refused')})"
    fields["api_key_set"] = "api_key" in mapping and not _is_empty(mapping["api_key"])
    fields["rejected"] = types.MappingProxyType(rejected)
    return fields


def _is_empty(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


# A secret's value as a log line writes it: `api_key='…'`, `'api_key': '…'`, `"hf_token": "…"`
# (either quote, escapes inside), or a bare word (`api_key=None` is left as it is). The name
# starts a word: without that, `\w+_api_key` was tried from every character of a long word and
# ran to its end each time (a 20 KB batch line with "token" in it took 2 s, 200 KB minutes).
_SECRET_NAME: Final = (
    r"(?<!\w)"
    r"(?:api_key|admin_api_key|hf_token|ssl_keyfile_password|\w+_api_key|\w+_password|\w+_secret)"
)
_SECRET_VALUE_RE: Final = re.compile(
    rf"""(?P<key>(?P<q>['"]?){_SECRET_NAME}(?P=q)\s*[=:]\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|(?!None\b)[^\s,)}]+)"""
)


def redact_line(line: str) -> str:
    """A log line with every secret's value (api_key and the like) replaced by <redacted>, as
    ServerArgs.raw keeps them: for the raw view, the saved view and the copy key, which show
    lines as written."""
    if (
        "key" not in line
        and "token" not in line
        and "password" not in line
        and "secret" not in line
    ):
        return line
    return _SECRET_VALUE_RE.sub(lambda m: f"{m.group('key')}'{REDACTED}'", line)


def _is_secret(key: str) -> bool:
    return key in _SECRET_KEYS or key.endswith(_SECRET_SUFFIXES)


def visible_deep(value: object) -> object:
    """`value` with every string in it (keys of nested mappings included) filtered."""
    if isinstance(value, str):
        return make_visible(value)
    if isinstance(value, list):
        return [visible_deep(v) for v in value]
    if isinstance(value, tuple):
        return tuple(visible_deep(v) for v in value)
    if isinstance(value, dict):
        return {visible_deep(k): visible_deep(v) for k, v in value.items()}
    return value


def _redacted(mapping: Mapping[str, object]) -> types.MappingProxyType[str, object]:
    clean: dict[str, object] = {}
    for key, value in mapping.items():
        name = str(key)
        value = REDACTED if _is_secret(name) and not _is_empty(value) else visible_deep(value)
        clean[make_visible(name)] = value
    return types.MappingProxyType(clean)


def _build(mapping: Mapping[str, object], form: str, truncated: bool) -> ServerArgs:
    return ServerArgs(
        raw=_redacted(mapping), form=form, truncated=truncated, **_typed_fields(mapping)
    )


def server_args_from_mapping(mapping: Mapping[str, object], form: str = "dict") -> ServerArgs:
    """Build :class:`ServerArgs` from an already decoded mapping (e.g. ``/server_info`` JSON)."""
    return _build(mapping, form, truncated=False)


# --------------------------------------------------------------------------------------------
# the scanner
#
# Hand-written on purpose: ast.literal_eval on the whole line fails as soon as one value is a
# non-literal repr (``<LoadFormat.AUTO: 'auto'>``, ``PosixPath(...)``, ``inf``) or the log line
# was cut short, and a regex over nested quotes/brackets is either wrong or prone to
# catastrophic backtracking. This scanner makes one left-to-right pass (regex jumps between the
# few significant characters), never recurses, and splits only at top-level commas.


def _string_end(text: str, start: int) -> int | None:
    """Index just past the string literal opening at ``text[start]``; None if unterminated."""
    stop = _STRING_STOP_RE[text[start]]
    pos = start + 1
    while True:
        match = stop.search(text, pos)
        if match is None:
            return None
        if match.group() == "\\":
            pos = match.start() + 2
            continue
        return match.end()


def _split_top_level(text: str, start: int, opener: str) -> tuple[list[str], bool]:
    """Split the body after ``opener`` at top-level commas.

    Returns the complete segments and whether the closing bracket was found. A segment still
    open at the end of the text (a truncated line) is dropped: its value may be cut short.
    Mismatched closers are tolerated: one whose opener is on the stack pops down to it, any
    other one is ignored.
    """
    stack = [opener]
    open_counts = {"(": 0, "[": 0, "{": 0}
    open_counts[opener] = 1
    segments: list[str] = []
    segment_start = pos = start
    while True:
        match = _SPECIAL_RE.search(text, pos)
        if match is None:
            return segments, False
        at = match.start()
        char = text[at]
        pos = at + 1
        if char in "'\"":
            end = _string_end(text, at)
            if end is None:
                return segments, False
            pos = end
        elif char == ",":
            if len(stack) == 1:
                segments.append(text[segment_start:at])
                segment_start = pos
        elif char in "([{":
            stack.append(char)
            open_counts[char] += 1
        else:
            wanted = _OPENER_OF[char]
            if open_counts[wanted]:
                while True:
                    top = stack.pop()
                    open_counts[top] -= 1
                    if top == wanted:
                        break
                if not stack:
                    segments.append(text[segment_start:at])
                    return segments, True


def _literal_value(source: str) -> object:
    """The value of a Python literal; anything else is kept as its (stripped) source text."""
    text = source.strip()
    if text in _NAMED_LITERALS:
        return _NAMED_LITERALS[text]
    if not text or text[0] not in _LITERAL_START:
        return text
    if _PLAIN_INT_RE.fullmatch(text) and len(text) < 19:  # most values: ast costs ~5 µs each
        return int(text)
    try:
        if "\\" in text:  # invalid escapes warn at parse time; they are not our user's problem
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ast.literal_eval(text)
        return ast.literal_eval(text)
    except _LITERAL_EVAL_ERRORS:
        return text


def _repr_pair(segment: str) -> tuple[str, object] | None:
    key, sep, value = segment.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        return None
    return key, _literal_value(value)


def _dict_pair(segment: str) -> tuple[str, object] | None:
    text = segment.strip()
    if not text or text[0] not in "'\"":
        return None
    end = _string_end(text, 0)
    if end is None:
        return None
    key = _literal_value(text[:end])
    rest = text[end:].lstrip()
    if not isinstance(key, str) or not rest.startswith(":"):
        return None
    return key, _literal_value(rest[1:])


def parse_server_args(message: str) -> ServerArgs | None:
    """Parse a ``server_args=...`` log message (text after the log prefix).

    Returns None when the message is not a server_args line (or is cut before its form can be
    told). A line cut short gives the pairs that were complete, with ``truncated=True``.
    """
    if not isinstance(message, str):
        return None
    prefix = _PREFIX_RE.match(message)
    if prefix is None:
        return None
    body_start = prefix.end()
    if message.startswith("{", body_start):
        form, opener, pair = "dict", "{", _dict_pair
        start = body_start + 1
    else:
        head = _REPR_HEAD_RE.match(message, body_start)
        if head is None:
            rest = message[body_start:].rstrip()
            if rest and "ServerArgs(".startswith(rest):
                return _build({}, "repr", truncated=True)
            return None
        form, opener, pair = "repr", "(", _repr_pair
        start = head.end()
    segments, closed = _split_top_level(message, start, opener)
    raw: dict[str, object] = {}
    for segment in segments:
        parsed = pair(segment)
        if parsed is not None:
            raw[parsed[0]] = parsed[1]
    return _build(raw, form, truncated=not closed)
