"""Turn one line of SGLang output (any version 0.3.6 … 0.5.23) into a typed event, or None."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from kvtop.sglang import events as ev
from kvtop.sglang.bounds import MAX_COUNT, MAX_GIB, refusal
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.dsv4_lines import dsv4_memory_calculation, dsv4_pool_sizes
from kvtop.sglang.prefix import find_prefix, prefix_of, split_prefix, strip_shipper
from kvtop.sglang.retraction_lines import retraction
from kvtop.sglang.running_cap_lines import max_running_capped, max_running_reduced
from kvtop.sglang.server_args import parse_server_args
from kvtop.sglang.systemd_lines import parse_systemd_message, unit_lines_of

# Longer lines are cut before matching: no SGLang line we read is anywhere near this long except
# server_args (tens of KB), and a cap keeps a hostile 1 GB line from costing more than a moment.
MAX_LINE_CHARS = 1 << 20

_NUM = r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|[nN]a[nN]|[iI]nf))"
_INT = r"([-+]?\d+)"

# Numbers refused while the current line is parsed, as (logged text, reason); set by parse_line.
_refused = threading.local()


def _refusals() -> list[tuple[str, str]] | None:
    """This thread's refused numbers while parse_line runs (None outside it)."""
    found: list[tuple[str, str]] | None = getattr(_refused, "items", None)
    return found


def _refuse(text: str, reason: str) -> None:
    found = _refusals()
    if found is not None and len(found) < 16:
        found.append((text, reason))


def _number(
    text: str | None, limit: float = MAX_COUNT, *, signed: bool = False, negative: str = "negative"
) -> float | None:
    """A logged number, or None when absent; one outside the bounds (bounds.py) is refused and noted."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    why = refusal(value, limit, signed=signed, negative=negative)
    if why is not None:
        _refuse(text, why)
        return None
    return value


def _gib(text: str | None) -> float | None:
    """A memory size or free-memory reading in GiB: never negative, never above MAX_GIB."""
    return _number(text, MAX_GIB, negative="negative memory")


def _gib_change(text: str | None) -> float | None:
    """`mem usage=`: memory taken by a step, negative when the step freed some."""
    return _number(text, MAX_GIB, signed=True)


def _seconds(text: str | None) -> float | None:
    return _number(text, negative="negative duration")


def _whole(text: str | None, *, signed: bool = False) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    why = refusal(value, MAX_COUNT, signed=signed, negative="negative count")
    if why is not None:
        _refuse(text, why)
        return None
    return value


def _count(text: str | None) -> int | None:
    """Tokens, requests, sizes: a whole number from 0 to MAX_COUNT."""
    return _whole(text)


def _signed_int(text: str | None) -> int | None:
    """A whole number that may be negative: chunked_prefill_size -1 turns chunking off."""
    return _whole(text, signed=True)


def _field(pattern: str) -> Callable[[str], str | None]:
    compiled = re.compile(pattern)

    def find(message: str) -> str | None:
        match = compiled.search(message)
        return match.group(1) if match else None

    return find


_avail = _field(r"avail mem=" + _NUM + r" ?GB")
_usage = _field(r"mem usage=" + _NUM + r" ?GB")
_elapsed = _field(r"(?:elapsed=|Time elapsed: )" + _NUM + r" ?s")
_type = _field(r"\btype=([^,\s]+)")
_dtype_eq = _field(r"\bdtype=([^,\s]+)")
_QUANT_START = re.compile(r"\bquant=")


def _quant(message: str) -> str | None:
    """`quant=..., ` up to the first `, avail mem=` after it. Two finds, not `quant=.*?, avail`:
    that lazy pattern rescans the rest of the line from every `quant=` (quadratic)."""
    start = _QUANT_START.search(message)
    if start is None:
        return None
    end = message.find(", avail mem=", start.end())
    return None if end < 0 else message[start.start() : end]


_tokens = _field(r"#tokens: " + _INT)
_k_size = _field(r"\bK size: " + _NUM + r" ?GB")
_v_size = _field(r"(?<![A-Z])V size: " + _NUM + r" ?GB")
_kv_size = _field(r"\bKV size: " + _NUM + r" ?GB")
_dtype_colon = _field(r"\bdtype: ([^,\s]+)")


# --- handlers, one per message family -------------------------------------------------------------


def _init(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    step = "parallel" if msg.startswith("Init parallel") else "torch distributed"
    if " begin" in msg[:30]:
        return ev.InitBegin(prefix, msg, step=step)
    if " ends" in msg[:30]:
        return ev.InitEnd(
            prefix,
            msg,
            step=step,
            elapsed_s=_seconds(_elapsed(msg)),
            mem_usage_gib=_gib_change(_usage(msg)),
        )
    return None


def _baseline(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.MemoryBaseline(prefix, msg, mem_usage_gib=_gib_change(_usage(msg)))


def _load_weight(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    if msg.startswith("Load weight begin"):
        return ev.LoadWeightBegin(prefix, msg, avail_gib=_gib(_avail(msg)))
    if msg.startswith("Load weight end"):
        return ev.LoadWeightEnd(
            prefix,
            msg,
            model_type=_type(msg),
            dtype=_dtype_eq(msg),
            quant=_quant(msg),
            elapsed_s=_seconds(_elapsed(msg)),
            avail_gib=_gib(_avail(msg)),
            mem_usage_gib=_gib_change(_usage(msg)),
        )
    return None


_KV_HEAD_RE = re.compile(
    r"^(?P<name>(?:[\w\-. ]{1,64} )?KV Cache) (?P<verb>is allocated|VA upper bound)\b"
)


def _kv_cache(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    post_capture = msg.startswith("Post-capture KV sizing:")
    if post_capture:
        name, va = "KV Cache", False
    else:
        head = _KV_HEAD_RE.match(msg)
        if head is None:
            return None
        name, va = head.group("name"), head.group("verb") == "VA upper bound"
    return ev.KvCacheAllocated(
        prefix,
        msg,
        cache_name=name,
        dtype=_dtype_colon(msg),
        tokens=_count(_tokens(msg)),
        k_gib=_gib(_k_size(msg)),
        v_gib=_gib(_v_size(msg)),
        kv_gib=_gib(_kv_size(msg)),
        va_upper_bound=va,
        post_capture=post_capture,
        avail_gib=_gib(_avail(msg)) if post_capture else None,
    )


_mamba_size = _field(r"max_mamba_cache_size: " + _INT)
_conv = _field(r"conv_state size: " + _NUM + r" ?GB")
_ssm = _field(r"(?<!_)ssm_state size: " + _NUM + r" ?GB")
_inter_ssm = _field(r"intermediate_ssm_state_cache size: " + _NUM + r" ?GB")
_inter_conv = _field(r"intermediate_conv_window_cache size: " + _NUM + r" ?GB")


def _mamba(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.MambaCacheAllocated(
        prefix,
        msg,
        max_mamba_cache_size=_count(_mamba_size(msg)),
        conv_state_gib=_gib(_conv(msg)),
        ssm_state_gib=_gib(_ssm(msg)),
        intermediate_ssm_gib=_gib(_inter_ssm(msg)),
        intermediate_conv_gib=_gib(_inter_conv(msg)),
    )


_swa_usage = _field(r"SWAKVPool mem usage: " + _NUM + r" ?GB")
_swa_size = _field(r"swa size: " + _INT)
_full_size = _field(r"full size: " + _INT)
_full_layer = _field(r"full_layer_tokens=" + _INT)
_swa_layer = _field(r"swa_layer_tokens=" + _INT)


def _swa(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.SwaPoolAllocated(
        prefix,
        msg,
        mem_usage_gib=_gib(_swa_usage(msg)),
        swa_tokens=_count(_swa_size(msg)),
        full_tokens=_count(_full_size(msg)),
    )


def _sliding(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.SlidingWindowPool(
        prefix,
        msg,
        full_layer_tokens=_count(_full_layer(msg)),
        swa_layer_tokens=_count(_swa_layer(msg)),
    )


def _pool_end(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.MemoryPoolEnd(prefix, msg, avail_gib=_gib(_avail(msg)))


# `Capture cuda graph begin`, `Capture draft extend cuda graph end`, `Capture piecewise CUDA graph
# begin`, `Capture target verify CUDA graph end` (0.5.14+), `Capture cpu graph ...` (0.5.x CPU).
_CAPTURE_RE = re.compile(
    r"^Capture (?:(?P<role>target|draft) )?(?P<graph>decode |verify |prefill |extend |piecewise )?"
    r"(?:cuda|CUDA|cpu|npu) graph (?P<phase>begin|end|failed)\b"
)
_BS_LIST_RE = re.compile(r"^Capture (?:cuda|CUDA|cpu|npu) graph (?:bs|num tokens) \[([\d,\s]*)\]")


def _capture(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    match = _CAPTURE_RE.match(msg)
    if match is None:
        sizes = _BS_LIST_RE.match(msg)
        if sizes is None:
            return None
        values = tuple(int(x) for x in sizes.group(1).replace(",", " ").split() if x.isdigit())
        return ev.GraphBatchSizes(prefix, msg, batch_sizes=values)
    role = match.group("role")
    graph = (match.group("graph") or "decode").strip()
    phase = match.group("phase")
    if phase == "failed":
        # Out of memory when it says so, else graph_capture.
        return _failure(prefix, msg) or ev.Failure(prefix, msg[:2000], kind="graph_capture")
    if phase == "begin":
        return ev.GraphCaptureBegin(
            prefix, msg, role=role, graph=graph, avail_gib=_gib(_avail(msg))
        )
    return ev.GraphCaptureEnd(
        prefix,
        msg,
        role=role,
        graph=graph,
        elapsed_s=_seconds(_elapsed(msg)),
        mem_usage_gib=_gib_change(_usage(msg)),
        avail_gib=_gib(_avail(msg)),
    )


_capturing_bs = _field(r"\bbs=" + _INT)
_capturing_avail = _field(r"avail_mem=" + _NUM + r" ?GB")


def _capturing(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.GraphCaptureProgress(
        prefix, msg, bs=_count(_capturing_bs(msg)), avail_gib=_gib(_capturing_avail(msg))
    )


_SUMMARY_RE = re.compile(r"\b(\w+)=" + _NUM)
_SUMMARY_KEYS = frozenset(
    {
        "max_total_num_tokens",
        "chunked_prefill_size",
        "max_prefill_tokens",
        "max_running_requests",
        "context_len",
    }
)
_available_mem = _field(r"available_(?:gpu|cpu)_mem=" + _NUM + r" ?GB")


def _summary(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    values: dict[str, str] = {}
    for pair in _SUMMARY_RE.finditer(msg):  # only the keys read: no list of every pair
        if pair.group(1) in _SUMMARY_KEYS:
            values[pair.group(1)] = pair.group(2)  # the last one, as before
    return ev.Summary(
        prefix,
        msg,
        max_total_num_tokens=_count(values.get("max_total_num_tokens")),
        chunked_prefill_size=_signed_int(values.get("chunked_prefill_size")),
        max_prefill_tokens=_count(values.get("max_prefill_tokens")),
        max_running_requests=_count(values.get("max_running_requests")),
        context_len=_count(values.get("context_len")),
        available_gpu_mem_gib=_gib(_available_mem(msg)),
    )


_host_old = re.compile(
    r"^Allocating " + _NUM + r" GB host memory for (hierarchical KV cache|V4 paged pool)"
)
_host_new = re.compile(
    r"^Allocating (?:(?P<label>.{1,64}?) )?hierarchical KV host pool: "
    + _INT
    + r" tokens, "
    + _NUM
    + r" GB host memory"
)


def _allocating(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    old = _host_old.match(msg)
    if old is not None:
        label = None
        if old.group(2) == "V4 paged pool":
            name = re.search(r"V4 paged pool '([^']*)'", msg)
            label = name.group(1) if name else "V4 paged pool"
        return ev.HostKvAllocated(prefix, msg, gb=_gib(old.group(1)), label=label)
    new = _host_new.match(msg)
    if new is not None:
        return ev.HostKvAllocated(
            prefix,
            msg,
            gb=_gib(new.group(3)),
            tokens=_count(new.group(2)),
            label=new.group("label"),
        )
    return None


_headroom_host = _field(r"host " + _NUM + r" ?GiB")
_headroom_cgroup = _field(r"cgroup " + _NUM + r" ?GiB")


def _headroom(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.HostMemoryHeadroom(
        prefix, msg, host_gib=_gib(_headroom_host(msg)), cgroup_gib=_gib(_headroom_cgroup(msg))
    )


def _server_args(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    args = parse_server_args(msg)
    if args is None:
        return None
    return ev.ServerArgsLogged(prefix, msg[:200], args=args)


_reset_value = _field(r"reset to " + _INT)


def _max_running_reset(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.MaxRunningRequestsReset(prefix, msg, value=_count(_reset_value(msg)))


_capped_re = re.compile(
    r"^max_total_tokens=" + _INT + r" is larger than the profiled value " + _INT
)


def _max_total(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    capped = _capped_re.match(msg)
    if capped is not None:
        return ev.MaxTotalTokensCapped(
            prefix,
            msg,
            user_tokens=_count(capped.group(1)),
            profiled_tokens=_signed_int(capped.group(2)),
        )
    return _summary(prefix, msg)


def _ready(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.ServerReady(prefix, msg)


_uvicorn_url = _field(r"Uvicorn running on (\S+)")


def _uvicorn(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.ServerListening(prefix, msg, url=_uvicorn_url(msg))


# Shutdown lines of SGLang's own source, matched anywhere in a message: the main process's
# SIGTERM handler (0.4.6–0.5.23), uvicorn's own lines (the level word "INFO:" comes first),
# Ctrl-C's bare KeyboardInterrupt (the last line of each child's traceback).
_UVICORN_SHUTDOWN_RE = re.compile(
    r"^(?:INFO:\s+)?(Shutting down|Waiting for application shutdown\.)$"
)
_remaining = _field(r"(?i)remaining number of requests:? " + _INT)
_SHUTDOWN_TEXTS = (
    "SIGTERM received",
    "Shutting down",
    "Waiting for application shutdown",
    "KeyboardInterrupt",
    "Gracefully exiting",
    "Finished server process",
    "kill_process_tree called",
)


def _shutdown(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    own = own_words(msg)
    if "SIGTERM received" in own:
        how = "forced" if msg.startswith("Signal SIGTERM received while") else "sigterm"
        return ev.ShutdownBegun(prefix, msg, how=how)
    if _UVICORN_SHUTDOWN_RE.match(msg):
        return ev.ShutdownBegun(prefix, msg, how="uvicorn")
    if msg == "KeyboardInterrupt":
        return ev.ShutdownBegun(prefix, msg, how="ctrl-c")
    if msg.startswith("Gracefully exiting"):
        return ev.ShutdownProgress(prefix, msg, remaining=_count(_remaining(msg)))
    if "Finished server process" in own or msg.startswith("kill_process_tree called"):
        return ev.ShutdownProgress(prefix, msg, finished=True)
    return None


def _unbalanced(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return ev.UnbalancedMemory(prefix, msg)


# Batch lines: `key: value` pairs separated by ", " (0.3.6 … 0.5.23 differ only in which keys
# appear, `batch.` vs `batch,`, an optional `[iter]`, and a trailing ", ").
# A key is a run of these characters ending in ": ", starting at its first ASCII letter (or a "#"
# right before it); its value runs to the next ",". The scan below finds each ": " once and
# looks back over its key: linear in the line. (The regex `(#?[a-zA-Z][\w\-. ()/]*?): ([^,]*)`
# it replaces tried every position of a long run of key characters up to the run's end, so a
# 64 KB tail cost 50 s.)
_BATCH_KEY_RE = re.compile(r"(?:#|(?<![\w\-. ()/]))[\w\-. ()/]++: ")
_ASCII_LETTER_RE = re.compile(r"[a-zA-Z]")


def batch_pairs(msg: str) -> Iterator[tuple[str, str]]:
    """The `key: value` pairs of a batch line, in order (keys and values as logged)."""
    pos = 0
    while (found := _BATCH_KEY_RE.search(msg, pos)) is not None:
        colon = found.end() - 2
        run_start = found.start() + (msg[found.start()] == "#")
        letter = _ASCII_LETTER_RE.search(msg, run_start, colon)
        if letter is None:  # no letter before this ": " (a number, a blank): not a key
            pos = colon + 1
            continue
        start = letter.start()
        if start == run_start and run_start != found.start():
            start -= 1  # "#running-req"
        comma = msg.find(",", colon + 2)
        end = len(msg) if comma < 0 else comma
        yield msg[start:colon], msg[colon + 2 : end]
        pos = end


_BATCH_KEYS: dict[str, str] = {
    "#running-req": "running_reqs",
    "#queue-req": "queued_reqs",
    "#token": "tokens",
    "#full token": "tokens",
    "token usage": "token_usage",
    "full token usage": "token_usage",
    "#new-seq": "new_seqs",
    "#new-token": "new_tokens",
    "#cached-token": "cached_tokens",
    "cache hit rate": "cache_hit_rate",
    "gen throughput (token/s)": "gen_throughput",
    "input throughput (token/s)": "input_throughput",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "cuda graph": "cuda_graph",
    "mamba usage": "mamba_usage",
    "mamba num": "mamba_slots_used",
}
_BATCH_INTS = {
    "running_reqs",
    "queued_reqs",
    "tokens",
    "new_seqs",
    "new_tokens",
    "cached_tokens",
    "mamba_slots_used",
}


def _plain_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _batch_value(field_name: str, raw: str) -> float | int | bool | str | None:
    raw = raw.strip()
    value: float | int | bool | None
    if field_name == "cuda_graph":
        value = {"True": True, "False": False}.get(raw)
    elif field_name == "cache_hit_rate":
        value = _number(raw.rstrip("%"))
        value = None if value is None else value / 100.0
    elif field_name in _BATCH_INTS:
        value = _count(raw)
    else:
        value = _number(raw)
    if value is None and raw and not _refused_already(raw):
        _refuse(raw, "not a number" if field_name != "cuda_graph" else "not True or False")
    return value


def _refused_already(text: str) -> bool:
    found = _refusals()
    return bool(found and found[-1][0] in (text, text.rstrip("%")))


def parse_batch(prefix: ev.LinePrefix, msg: str) -> ev.BatchStats | None:
    kind = "prefill" if msg.startswith("Prefill") else "decode"
    # Any: each value has the type _batch_value gives its field's name, which mypy cannot pair.
    fields: dict[str, Any] = {}
    extra: dict[str, float | int | bool | str] = {}
    for key, raw in batch_pairs(msg):
        key = key.strip()
        name = _BATCH_KEYS.get(key)
        if name is None:
            number = _plain_number(raw)
            extra[key] = number if number is not None else raw.strip()
            continue
        if name not in fields or fields[name] is None:
            fields[name] = _batch_value(name, raw)
    return ev.BatchStats(prefix, msg, kind=kind, extra=extra, **fields)


def _batch(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    return parse_batch(prefix, msg)


# First word(s) of a message -> handler. Checked with str.startswith, in order.
_HANDLERS: tuple[tuple[str, Callable[[ev.LinePrefix, str], ev.Event | None]], ...] = (
    ("Decode batch", _batch),
    ("Prefill batch", _batch),
    ("Init torch distributed", _init),
    ("Init parallel", _init),
    ("Memory baseline taken", _baseline),
    ("Load weight", _load_weight),
    ("Using KV cache dtype: ", lambda p, m: ev.KvCacheDtype(p, m, dtype=m[22:].strip())),
    ("KV Cache ", _kv_cache),
    ("Post-capture KV sizing:", _kv_cache),
    ("Mamba Cache is allocated", _mamba),
    ("SWAKVPool mem usage", _swa),
    ("Use sliding window memory pool", _sliding),
    ("Use Sliding window memory pool", _sliding),  # 0.5.2
    ("Memory pool end", _pool_end),
    ("Capture ", _capture),
    ("Capturing batches", _capturing),
    ("max_total_num_tokens=", _max_total),
    ("max_total_tokens=", _max_total),
    ("Allocating ", _allocating),
    ("HiCache memory headroom", _headroom),
    ("server_args=", _server_args),
    ("The server is fired up and ready to roll", _ready),
    ("Max running requests is reset to", _max_running_reset),
    # SGLang lowering max_running_requests as it sizes its pools (running_cap_lines.py).
    ("max_running_requests was reduced from", max_running_reduced),
    ("max_running_requests is capped to", max_running_capped),
    ("The memory capacity is unbalanced", _unbalanced),
    # DeepSeek-V4's compressed-attention pools (dsv4_lines.py); "DSv4" in early builds.
    ("DSV4 pool sizes:", dsv4_pool_sizes),
    ("DSV4 memory calculation:", dsv4_memory_calculation),
    ("DSv4 pool sizes:", dsv4_pool_sizes),
    ("DSv4 memory calculation:", dsv4_memory_calculation),
    # Running requests taken back to the queue: the pool was full at a decode step
    # (retraction_lines.py); 0.4.6's words for it are no out-of-memory failure.
    ("KV cache pool is full. Retract requests.", retraction),
    ("Decode out of memory happened.", retraction),
)

_not_enough_mfs = _field(r"mem_fraction_static=" + _NUM)
_loaded_mfs = _field(r"--mem-fraction-static=" + _NUM)
_raise_above = _field(r"above " + _NUM)
_min_viable = _field(r"minimum viable = [^=]*= " + _NUM)
_host_req = _field(r"Requesting " + _NUM + r" GB")
_host_free = _field(r"only have " + _NUM + r" GB")

# Out of memory on any backend (reference f.1): PyTorch's caching allocator (CUDA, HIP, NPU,
# XPU), allocations outside it ("CUDA error: out of memory"), HIP's and Triton's own words.
# Not the scheduler's logical-pool texts ("Decode out of memory happened" is a retraction).
_OOM_NEEDLES: tuple[str, ...] = (
    "CUDA out of memory",
    "HIP out of memory",
    "NPU out of memory",
    "XPU out of memory",
    "OutOfMemoryError",
    "CUDA error: out of memory",
    "HIP error: out of memory",
    "hipErrorOutOfMemory",
    "Triton Error [CUDA]: out of memory",
)

# Failure texts are matched in a message's own words (own_words): at its start, after the
# exception types of a traceback's last line (`RuntimeError: Not enough memory...`,
# `torch.OutOfMemoryError: CUDA out of...`) or a short lead-in (`Rank 0 scheduler is dead`),
# never inside a quoted string. Out of memory comes first: graph capture wraps a torch OOM
# ("Capture cuda graph failed: CUDA out of memory...").
_FAILURES: tuple[tuple[str, str], ...] = (
    *((needle, "out_of_memory") for needle in _OOM_NEEDLES),
    (ev.NO_MEMORY_FOR_KV, "not_enough_memory"),
    ("Not enough memory. Please try to increase", "not_enough_memory"),
    ("Not enough host memory available", "host_memory"),
    ("Capture cuda graph failed", "graph_capture"),
    ("Capture CUDA graph failed", "graph_capture"),
    ("Capture prefill CUDA graph failed", "graph_capture"),
    ("Capture CPU graph failed", "graph_capture"),
    ("Scheduler hit an exception", "scheduler_exception"),
    ("hit an exception: ", "exception"),  # TpModelWorkerClient, DetokenizerManager, ...
    ("Initialization failed. warmup error", "warmup"),
    ("scheduler is dead", "scheduler_died"),  # `Rank 0 scheduler is dead.` (0.4.6-0.5.8)
    ("scheduler died during initialization", "scheduler_died"),  # 0.5.10+
)

# "Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00 GiB of which 3.19 MiB is
# free." (torch >= 2.1), "(GPU 0; 2.00 GiB total capacity; ...; 0 bytes free; ...)" (older
# torch, NPU). Whitespace between words may be any run (a terminal's wrapping kept in a paste).
# A size starts where a number does: `_OOM_OLD_TOTAL` begins with it, and without the
# lookbehind a run of digits was tried from each of its digits to its end (quadratic).
_SIZE = r"(?<![\d.])(\d+(?:\.\d+)?)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
_UNIT_GIB = {"bytes": 1 / (1 << 30), "B": 1 / (1 << 30), "KiB": 1 / (1 << 20), "KB": 1 / (1 << 20)}
_UNIT_GIB |= {"MiB": 1 / 1024, "MB": 1 / 1024, "GiB": 1.0, "GB": 1.0, "TiB": 1024.0, "TB": 1024.0}
_OOM_TRIED = re.compile(r"Tried\s+to\s+allocate\s+" + _SIZE)
_OOM_NEW = re.compile(
    r"total\s+capac(?:i)?ty\s+of\s+" + _SIZE + r"\s+of\s+which\s+" + _SIZE + r"\s+is\s+free"
)
_OOM_OLD_TOTAL = re.compile(_SIZE + r"\s+total\s+capacity")
_OOM_OLD_FREE = re.compile(r"; " + _SIZE + r"\s+free\b")


def _size_gib(match: re.Match[str] | None, at: int = 1) -> float | None:
    if match is None:
        return None
    value = _gib(match.group(at))
    return None if value is None else round(value * _UNIT_GIB[match.group(at + 1)], 6)


def _oom_sizes(msg: str) -> ev.OomSizes:
    new = _OOM_NEW.search(msg)
    if new is not None:
        total, free = _size_gib(new, 1), _size_gib(new, 3)
    else:
        total, free = _size_gib(_OOM_OLD_TOTAL.search(msg)), _size_gib(_OOM_OLD_FREE.search(msg))
    return ev.OomSizes(tried_gib=_size_gib(_OOM_TRIED.search(msg)), free_gib=free, total_gib=total)


# A traceback's last line: `torch.OutOfMemoryError: CUDA out of memory...`, `EOFError`. Only at the
# start of a line without a prefix; log levels (uvicorn's bare `INFO:     ...`) are not types.
_EXCEPTION_RE = re.compile(r"(?:[A-Za-z_]\w{0,99}\.){0,8}[A-Za-z_]\w{0,99}(?=: |:$|$)")
# A type logged without a message (`EOFError`, `KeyboardInterrupt`) must look like one.
_BARE_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit", "Iteration", "Timeout", "Warning")
_NOT_TYPES = frozenset({"INFO", "WARNING", "WARN", "ERROR", "DEBUG", "CRITICAL", "NOTICE"})
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# A process's outermost frame: an uncaught exception there ended the process (`python -m`,
# a console script, a multiprocessing child), not one a handler logged and survived.
_ENTRY_FRAME_RE = re.compile(
    r'^ {2}File ".*", line \d+, in (?:<module>|_run_module_as_main|_bootstrap)$'
)


def _exception_type(msg: str) -> str | None:
    match = _EXCEPTION_RE.match(msg)
    if match is None or match.group(0) in _NOT_TYPES:
        return None
    name = match.group(0)
    if match.end() == len(msg) and not name.endswith(_BARE_SUFFIXES):
        return None
    return name


# --log-requests writes every request and its answer into the log: `Receive: obj=GenerateReqInput(
# rid='a1', text='...', ...)`, `Finish: obj=..., out={'text': '...', ...}` (0.4–0.5), `in=
# GenerateReqInput(...)` (0.3), or a JSON record whose event is `request.received` /
# `request.finished` (--log-requests-format json). A client's prompt or the model's answer may
# say anything ("why does torch say CUDA out of memory?"): none of it is the server's own word.
_ECHO_STARTS = ("Receive: ", "Finish: ")


def is_request_echo(msg: str) -> bool:
    """A request or response echoed by --log-requests (the message, its prefix split off)."""
    if msg.startswith(_ECHO_STARTS):
        return True
    head = msg[:160]
    if head.startswith("in=") and "ReqInput(" in head:
        return True
    return head.startswith("{") and '"request.' in head


# SGLang's failure sentences (and PyTorch's) begin a message, or follow a traceback's exception
# types and a short lead-in (`Failed to initialize lk_moe: CUDA out of memory`): well within
# this many characters, and before any quoted string, which is someone else's text (a prompt
# in an exception's message, a path, a repr).
_OWN_WORDS_CHARS = 512
# The numbers of a failure (the OOM sizes, the fraction to raise) are in its first sentences; a
# longer message (a pasted batch, a repr) is not scanned further, so a 1 MB line costs little.
_FAILURE_SCAN_CHARS = 4096


def own_words(msg: str) -> str:
    """The part of a message where a failure text of SGLang's may stand: its start, up to the
    first quote."""
    head = msg[:_OWN_WORDS_CHARS]
    for quote in ("'", '"'):
        at = head.find(quote)
        if at >= 0:
            head = head[:at]
    return head


def _failure(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    own = own_words(msg)
    for needle, kind in _FAILURES:
        if needle in own:
            msg = msg[:_FAILURE_SCAN_CHARS]
            return ev.Failure(
                prefix,
                msg[:2000],
                kind=kind,
                mem_fraction_static=_number(_loaded_mfs(msg) or _not_enough_mfs(msg)),
                raise_above=_number(_raise_above(msg)),
                min_viable=_number(_min_viable(msg)),
                requested_gb=_gib(_host_req(msg)),
                free_gb=_gib(_host_free(msg)),
                oom=_oom_sizes(msg) if kind == "out_of_memory" else None,
                exception_line=not prefix.has_prefix and _exception_type(msg) is not None,
            )
    return None


# How a run ends without a Python exception of its own (reference f.1): the parent's words
# about a child that died (0.5.10+ SubprocessWatchdog, 0.4.6's SIGCHLD handler, the SIGQUIT
# handlers, node_rank >= 1's `terminated with`), a watchdog that found the scheduler stuck,
# and what a process prints as it aborts (faulthandler, C++'s terminate, ROCm's fault).
_CRASHED_RE = re.compile(
    r"Subprocess (\S{1,100}) \(pid=[^)]{1,16}\) crashed with exit code (-?\d{1,4})"
)
_TERMINATED_RE = re.compile(
    r"^Scheduler or DataParallelController \d{1,10} terminated with (-?\d{1,4})"
)
_CRASH_TEXTS = (
    "SIGQUIT received",
    "Received sigquit from a child process",
    "Child process unexpectedly failed with an exit code",
    "terminate called after throwing an instance of",
    "Memory access fault by GPU",
)
_WATCHDOG_RE = re.compile(r"^(?:Scheduler )?[Ww]atchdog timeout \(")
_NCCL_WATCHDOG = "Watchdog caught collective operation timeout"
# A shell's or a terminal's words for a process it ran that died: `Killed`, `Aborted (core
# dumped)`, a script's `./run.sh: line 31:  2467 Killed   python3 -m sglang...`, a job line
# `[1]+  Killed   python3 ...`. The command after the word needs two spaces (as shells align
# it), so `Killed actor ...` of another program is not one.
_SHELL_END_RE = re.compile(
    r"^(?:(?:.{0,300}: line \d{1,9}: +|\[\d{1,6}\][+-]? +)(?:\d{1,10} +)?)?"
    r"(Killed|killed|已杀死|Aborted|Segmentation fault|Bus error)(?: \(core dumped\))?(?:  +\S.*)?$"
)
_LEAKED_RE = re.compile(r"resource_tracker: There appear to be \d{1,9} leaked \w+ objects")
_CONTAINER_EXIT_RE = re.compile(r"^[\w.-]{1,128} exited with code (\d{1,3})$")
_ENDING_TEXTS = (
    "crashed with exit code",
    "terminated with",
    *_CRASH_TEXTS,
    "atchdog timeout",
    _NCCL_WATCHDOG,
    "Fatal Python error: ",
    "Killed",
    "killed",
    "已杀死",  # a shell's "Killed" in a Chinese locale
    "Aborted",
    "Segmentation fault",
    "Bus error",
    "resource_tracker: There appear",
    "exited with code",
)


def _ending(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    """A line that ends the run (or says it ended) without a traceback of its own."""
    own = own_words(msg)
    crashed = _CRASHED_RE.search(own)
    if crashed is not None:
        return ev.Failure(prefix, msg[:2000], kind="crash")
    terminated = _TERMINATED_RE.match(msg)
    if terminated is not None:
        return None if terminated.group(1) == "0" else ev.Failure(prefix, msg[:2000], kind="crash")
    if any(text in own for text in _CRASH_TEXTS) or msg.startswith("Fatal Python error: "):
        return ev.Failure(prefix, msg[:2000], kind="crash")
    if _WATCHDOG_RE.match(msg) is not None:
        # `self.soft=True` only logs (0.5.8+ --soft-watchdog-timeout): the server goes on.
        return None if "soft=True" in msg else ev.Failure(prefix, msg[:2000], kind="watchdog")
    if _NCCL_WATCHDOG in own:
        return ev.Failure(prefix, msg[:2000], kind="watchdog")
    shell = _SHELL_END_RE.match(msg)
    if shell is not None:
        if shell.group(1) in ("Killed", "killed", "已杀死"):
            return ev.ProcessExited(prefix, msg[:2000], how="killed", code=137)
        return ev.Failure(prefix, msg[:2000], kind="crash")
    if _LEAKED_RE.search(own) is not None:
        return ev.ProcessExited(prefix, msg[:2000], how="resource_tracker")
    container = _CONTAINER_EXIT_RE.match(msg)
    if container is not None:
        return ev.ProcessExited(prefix, msg[:2000], how="exit_status", code=int(container.group(1)))
    return None


def _traceback_part(prefix: ev.LinePrefix, line: str) -> ev.Event | None:
    """A line of a traceback record: unprefixed; None for any other line."""
    if prefix.has_prefix:
        return None
    if line.startswith('  File "'):
        return ev.TracebackFrame(prefix, line[:1000], entry=_ENTRY_FRAME_RE.match(line) is not None)
    msg = line.strip()
    if msg == _TRACEBACK:
        return ev.TracebackStart(prefix, msg)
    if msg in _CHAINED:
        return ev.TracebackChained(prefix, msg)
    if line[:1].isspace():
        return None
    exc_type = _exception_type(msg)
    if exc_type is None:
        return None
    return ev.ExceptionLine(prefix, msg[:2000], exc_type=exc_type)


# A terminal colour code (`\x1b[32m`): some loggers colour their prefix; matching reads past it.
_COLOUR_RE = re.compile(r"\x1b\[[0-9;]{0,32}m")
_LEADING_JUNK = ("\ufeff", "\ufffd")
_COLOURED_HEAD_CHARS = 300


def normalize(line: str | bytes) -> str:
    """Text to match: decoded leniently, NULs, a leading byte-order mark and a coloured
    prefix's colour codes dropped, last carriage-return segment (tqdm)."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS]
    if "\x00" in line:
        line = line.replace("\x00", "")
    line = line.rstrip("\r\n")
    if "\r" in line:
        # tqdm redraws with \r; the last non-empty redraw is the current state.
        parts = [part for part in line.split("\r") if part.strip()]
        line = parts[-1] if parts else ""
    if line[:1] in _LEADING_JUNK:
        line = line.lstrip("\ufeff\ufffd")  # a byte-order mark, undecodable bytes before it
    if line.startswith("\x1b["):
        # A coloured header (`\x1b[31m[2026-… TP0]\x1b[0m`, Ray's `\x1b[36m(WorkerDict
        # pid=616)\x1b[0m`): read through the colour codes of the line's head; any later in
        # the message stay, to be shown as the codes they are.
        line = _COLOUR_RE.sub("", line[:_COLOURED_HEAD_CHARS]) + line[_COLOURED_HEAD_CHARS:]
    return line


def _first_word(msg: str) -> str:
    end = msg.find(" ")
    word = msg if end < 0 else msg[:end]
    equals = word.find("=")
    return word if equals < 0 else word[: equals + 1]


# Handlers grouped by the first word of their message, so a line costs one dict lookup.
_BY_FIRST_WORD: dict[str, list[tuple[str, Callable[[ev.LinePrefix, str], ev.Event | None]]]] = {}
for _start, _handler in _HANDLERS:
    _BY_FIRST_WORD.setdefault(_first_word(_start), []).append((_start, _handler))


def parse_message(prefix: ev.LinePrefix, message: str) -> ev.Event | None:
    """Classify a message whose prefix has already been split off."""
    msg = message.strip()
    if is_request_echo(msg):
        return None  # a client's words, whatever they say
    for start, handler in _BY_FIRST_WORD.get(_first_word(msg), ()):
        if msg.startswith(start):
            event = handler(prefix, msg)
            if event is not None:
                return event
            break
    if " KV Cache " in msg[:80]:  # a labelled pool: "{label} KV Cache is allocated. ..." (0.5.19+)
        event = _kv_cache(prefix, msg)
        if event is not None:
            return event
    if "Uvicorn running on" in own_words(msg):
        return _uvicorn(prefix, msg)
    shutdown = _shutdown(prefix, msg)
    if shutdown is not None:
        return shutdown
    return _failure(prefix, msg) or _ending(prefix, msg)


# Every text some handler starts with or looks for, as one alternation: most lines of a busy
# server (HTTP access lines, warnings) contain none of them and are dropped before the prefix
# is decoded. Measured on 1M uvicorn access lines: 3.0 µs -> under 1 µs per line.
_ANY_KNOWN = re.compile(
    "|".join(
        re.escape(text.strip())
        for text in [start for start, _ in _HANDLERS]
        + [needle for needle, _ in _FAILURES]
        + [" KV Cache ", "Uvicorn running on", *_SHUTDOWN_TEXTS, *_ENDING_TEXTS]
    )
)


# SGLang's own message starts, for telling a line kvtop could not read from one it ignores:
# whole words only (`Load weight` is SGLang's, `Load weights maybe?` is not).
_SGLANG_START_RE = re.compile(
    "|".join(
        re.escape(start) + (r"(?!\w)" if start[-1].isalnum() else "") for start, _ in _HANDLERS
    )
)
# Behind a prefix kvtop could not take apart (`[12/05/2026 22:24:31] KV Cache is allocated.`):
# a bracket closed within the first 80 characters, then one of SGLang's message starts.
_OTHER_PREFIX_RE = re.compile(r"\[[^\]]{1,80}\] ?")
MAX_NOT_UNDERSTOOD_CHARS = 300


def _not_understood(prefix: ev.LinePrefix, message: str, text: str) -> ev.NotUnderstood | None:
    """The line as not understood when it starts (after its prefix) with one of SGLang's own
    message starts that no handler read: a form kvtop does not know."""
    msg = message.strip()
    if not prefix.has_prefix:
        other = _OTHER_PREFIX_RE.match(msg)
        if other is None:
            return None
        msg = msg[other.end() :]
    if _SGLANG_START_RE.match(msg) is None:
        return None
    return ev.NotUnderstood(prefix, text.strip()[:MAX_NOT_UNDERSTOOD_CHARS])


def parse_line(line: str | bytes) -> ev.Event | None:
    """One line of SGLang output -> an event, or None when the line says nothing kvtop reads.

    Never raises on any input: bad bytes, NULs, huge lines and garbage are skipped or cut.
    """
    text = normalize(line)
    if not text:
        return None
    if text[0] != "[" or text.startswith("[pod/"):
        # A shipper's or a viewer's header (`journalctl -u UNIT > log`, CRI, Docker, Loki):
        # stripped from every line alike, the bare traceback lines too.
        text, ident = strip_shipper(text)
        if ident is not None and unit_lines_of(ident):
            return parse_systemd_message(ev.NO_PREFIX, make_visible(text))
        if not text:
            return None
    if _ANY_KNOWN.search(text) is None:
        # Where a prefix may begin, cheaply: a bracket, a date with its bracket lost, a bar.
        if text[0] == "[" or text[0].isdigit() or text.find("][", 0, 1024) >= 0:
            found = find_prefix(text)
            if found is not None:
                if not found.group("tags"):
                    return None  # the main process's chatter (access lines): nothing to read
                return ev.RankSeen(prefix_of(found), "")  # any line of a rank: it exists
        # A traceback's own lines: `Traceback (...)`, frames, the final `ExcType: message`.
        if _EXCEPTION_RE.match(text) is None and text[0] not in " TD":
            return None
        return _traceback_part(ev.NO_PREFIX, make_visible(text))
    text = make_visible(text)  # no event carries a control character to a screen
    prefix, message = split_prefix(text)
    if not prefix.has_prefix and message[:1].isspace():
        return _traceback_part(prefix, message)  # a traceback's source line quoting a failure text
    refused: list[tuple[str, str]] = []
    _refused.items = refused
    try:
        event = parse_message(prefix, message)
    except (ValueError, OverflowError, IndexError):  # defensive: odd numbers in odd places
        return None
    finally:
        _refused.items = None
    if refused and event is not None:
        event = replace(event, rejected=tuple(_describe(event.message, refused)))
    if event is None or type(event) is ev.RankSeen:
        not_read = _not_understood(prefix, message, text)
        if not_read is not None:
            return not_read
    if event is None and not prefix.has_prefix and not is_request_echo(message.strip()):
        # A traceback's last line naming a known text where it is not SGLang's own
        # (`ValueError: bad input 'CUDA out of memory'`): still the exception line it is.
        return _traceback_part(prefix, message)
    if event is None and prefix.rank:
        return ev.RankSeen(prefix, "")
    return event


def _describe(message: str, refused: list[tuple[str, str]]) -> list[str]:
    """`avail mem=nan (not a finite number)`: each refused number with the words logged before it."""
    described = []
    search_from: dict[str, int] = {}  # the same text refused twice: its next occurrence
    for value, reason in refused:
        pattern = re.compile(r"(?<=[=: ])" + re.escape(value) + r"(?![\w.])")
        found = pattern.search(message, search_from.get(value, 0))
        if found is None:
            described.append(f"{value[:40]} ({reason})")
            continue
        search_from[value] = found.end()
        before = message[max(0, found.start() - 40) : found.start()]
        label = before[max(before.rfind(", "), before.rfind(". ")) + 1 :]
        opening = label.rfind("(")
        if opening >= 0 and ")" not in label[opening:]:
            label = label[opening + 1 :]
        described.append(f"{label.lstrip()}{value[:40]} ({reason})")
    return described
