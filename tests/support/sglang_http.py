"""A real HTTP server on 127.0.0.1 that answers like SGLang's /metrics, /server_info and /health.

The exposition text comes from a real ``prometheus_client.CollectorRegistry`` with SGLang's
family names and labels; switches on :class:`FakeSGLang` inject the faults a monitor meets.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
MODEL = "moonshotai/Kimi-K2.5"
# Many buckets, like SGLang's latency histograms: most of a real scrape's 115 KB.
_LATENCY_BUCKETS = tuple(round(0.001 * 1.25**i, 6) for i in range(48))
_FUNC_NAMES = tuple(f"func_{i}" for i in range(25))


@dataclass
class Deployment:
    """What the fake server reports; per-DP-group numbers (one KV pool per DP group)."""

    version: str = "0.5.12"
    tp_size: int = 8
    dp_size: int = 1
    all_schedulers: bool = False  # --enable-metrics-for-all-schedulers
    max_total_num_tokens: int = 159277  # per DP group
    num_used_tokens: tuple[int, ...] = (48211,)  # per DP group (cycled)
    running: int = 12
    queued: int = 0
    gen_throughput: float = 512.0
    cache_hit_rate: float = 0.41
    page_size: int = 1
    context_len: int = 262144
    # A hybrid model's state pool per DP group: None sends no mamba family at all; 0 sends
    # SGLang's zeros of a plain model (0.5.6+ always sends sglang:mamba_usage).
    mamba_slots: int | None = None
    mamba_used: int = 0
    # Radix-cached tokens no running request uses, per DP group (sglang:kv_evictable_tokens,
    # 0.5.12+): neither used nor free.
    evictable_tokens: int = 0
    # The max_running_requests each DP worker runs with, as /server_info's internal state
    # says it (effective_max_running_requests_per_dp); None leaves the field out.
    max_running_requests: int | None = None
    pad: bool = True  # histograms and tokenizer families, for a realistic size
    # Requests retracted per DP group since the start (0.5.8+): None sends no retraction family
    # (an older SGLang); 0 only the gauge sglang:num_retracted_reqs, as SGLang before its
    # first retraction (its counters appear with it); the gauge holds the latest batch's.
    retracted: int | None = None
    retracted_latest: int = 0

    def publishers(self) -> list[tuple[int, int]]:
        """(dp_rank, tp_rank) of every scheduler that publishes."""
        attn_tp = max(1, self.tp_size // self.dp_size)
        out = []
        for tp in range(self.tp_size):
            dp, attn_tp_rank = divmod(tp, attn_tp)
            if self.all_schedulers or attn_tp_rank == 0:
                out.append((dp, tp))
        return out


def _version_at_least(version: str, wanted: tuple[int, ...]) -> bool:
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    return parts >= wanted


def publisher_labels(dep: Deployment, dp: int, tp: int) -> dict[str, str]:
    """The labels one publishing scheduler puts on its series (dp_rank only with DP)."""
    labels = {
        "model_name": MODEL,
        "engine_type": "unified",
        "tp_rank": str(tp),
        "pp_rank": "0",
        "moe_ep_rank": str(tp),
    }
    if dep.dp_size > 1:
        labels["dp_rank"] = str(dp)
    return labels


def _retraction_families(
    reg: CollectorRegistry, labelnames: tuple[str, ...], dep: Deployment
) -> None:
    """SGLang's retraction gauge and counters (metrics_collector.py, 0.5.8 … 0.5.23)."""
    if dep.retracted is None:
        return
    latest = Gauge(
        "sglang:num_retracted_reqs", "The number of retracted requests.", labelnames, registry=reg
    )
    counters = {
        "requests": Counter(
            "sglang:num_retracted_requests_total",
            "Total number of retracted requests.",
            labelnames,
            registry=reg,
        ),
        "input": Counter(
            "sglang:num_retracted_input_tokens_total",
            "Total number of retracted input tokens.",
            labelnames,
            registry=reg,
        ),
        "output": Counter(
            "sglang:num_retracted_output_tokens_total",
            "Total number of retracted output tokens.",
            labelnames,
            registry=reg,
        ),
    }
    for dp, tp in dep.publishers():
        labels = publisher_labels(dep, dp, tp)
        latest.labels(**labels).set(dep.retracted_latest)
        if dep.retracted > 0:
            counters["requests"].labels(**labels).inc(dep.retracted)
            counters["input"].labels(**labels).inc(dep.retracted * 2048)
            counters["output"].labels(**labels).inc(dep.retracted * 300)


def build_exposition(dep: Deployment) -> str:
    """Exposition text as prometheus_client writes it for such a deployment."""
    reg = CollectorRegistry()
    labelnames = (*SCHEDULER_LABELS, "dp_rank") if dep.dp_size > 1 else SCHEDULER_LABELS

    def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"sglang:{name}", doc, (*labelnames, *extra), registry=reg)

    families = {
        "num_running_reqs": "The number of running requests.",
        "num_used_tokens": "The number of used tokens.",
        "token_usage": "The token usage.",
        "gen_throughput": "The generation throughput (token/s).",
        "num_queue_reqs": "The number of requests in the waiting queue.",
        "cache_hit_rate": "The prefix cache hit rate.",
        "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
        "spec_accept_length": "The average acceptance length of speculative decoding.",
    }
    gauges = {name: gauge(name, doc) for name, doc in families.items()}
    v0510 = _version_at_least(dep.version, (0, 5, 10))
    v0512 = _version_at_least(dep.version, (0, 5, 12))
    v0519 = _version_at_least(dep.version, (0, 5, 19))
    cache_config = (
        gauge("cache_config_info", "Cache configuration information.", ("page_size", "num_pages"))
        if v0510 and not v0512
        else None
    )
    new = {}
    mamba = {}
    if dep.mamba_slots is not None:
        mamba["mamba_usage"] = gauge("mamba_usage", "The token usage for Mamba layers.")
        if _version_at_least(dep.version, (0, 5, 14)):
            for name in ("mamba_available_tokens", "mamba_evictable_tokens", "mamba_used_tokens"):
                mamba[name] = gauge(name, name.replace("_", " "))
    if v0512:
        for name in (
            "page_size",
            "num_pages",
            "context_len",
            "kv_used_tokens",
            "kv_available_tokens",
            "kv_evictable_tokens",
            "startup_available_gpu_memory_gb",
        ):
            new[name] = gauge(name, name.replace("_", " "))
    if v0519:
        new["weight_memory_usage_gb"] = gauge("weight_memory_usage_gb", "Weights in GB.")
        new["kv_cache_memory_usage_gb"] = gauge("kv_cache_memory_usage_gb", "KV in GB.")
        graph = gauge("graph_memory_usage_gb", "Graphs in GB.", ("phase",))
        startup = gauge("startup_time_seconds", "Startup time.", ("phase",))

    for dp, tp in dep.publishers():
        used = dep.num_used_tokens[dp % len(dep.num_used_tokens)]
        labels = publisher_labels(dep, dp, tp)
        total = dep.max_total_num_tokens
        gauges["num_running_reqs"].labels(**labels).set(dep.running)
        gauges["num_used_tokens"].labels(**labels).set(used)
        gauges["token_usage"].labels(**labels).set(round(used / total, 2))
        gauges["gen_throughput"].labels(**labels).set(dep.gen_throughput)
        gauges["num_queue_reqs"].labels(**labels).set(dep.queued)
        gauges["cache_hit_rate"].labels(**labels).set(dep.cache_hit_rate)
        gauges["max_total_num_tokens"].labels(**labels).set(total)
        gauges["spec_accept_length"].labels(**labels).set(2.5)
        if dep.mamba_slots is not None:
            share = dep.mamba_used / dep.mamba_slots if dep.mamba_slots else 0.0
            mamba["mamba_usage"].labels(**labels).set(share)
            if "mamba_used_tokens" in mamba:
                mamba["mamba_used_tokens"].labels(**labels).set(dep.mamba_used)
                free = dep.mamba_slots - dep.mamba_used
                mamba["mamba_available_tokens"].labels(**labels).set(free)
                mamba["mamba_evictable_tokens"].labels(**labels).set(0)
        pages = total // dep.page_size
        if cache_config is not None:
            cache_config.labels(**labels, page_size=str(dep.page_size), num_pages=str(pages)).set(1)
        if v0512:
            new["page_size"].labels(**labels).set(dep.page_size)
            new["num_pages"].labels(**labels).set(pages)
            new["context_len"].labels(**labels).set(dep.context_len)
            new["kv_used_tokens"].labels(**labels).set(used)
            new["kv_available_tokens"].labels(**labels).set(total - used - dep.evictable_tokens)
            new["kv_evictable_tokens"].labels(**labels).set(dep.evictable_tokens)
            new["startup_available_gpu_memory_gb"].labels(**labels).set(93.2 - 0.1 * tp)
        if v0519:
            new["weight_memory_usage_gb"].labels(**labels).set(72.9)
            new["kv_cache_memory_usage_gb"].labels(**labels).set(10.42)
            graph.labels(**labels, phase="decode").set(1.5)
            graph.labels(**labels, phase="draft_decode").set(0.6)
            startup.labels(**labels, phase="load_weights").set(95.0)
            startup.labels(**labels, phase="total").set(180.0 + tp)

    _retraction_families(reg, labelnames, dep)

    if dep.pad:
        tok = ("model_name",)
        names = (
            "time_to_first_token_seconds",
            "inter_token_latency_seconds",
            "e2e_request_latency_seconds",
            "queue_time_seconds",
        )
        for name in names:
            hist = Histogram(f"sglang:{name}", name, tok, buckets=_LATENCY_BUCKETS, registry=reg)
            for i in range(40):
                hist.labels(model_name=MODEL).observe(0.002 * 1.3**i)
        func = Histogram(
            "sglang:func_latency_seconds",
            "Function latency in seconds",
            ("name",),
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        for fname in _FUNC_NAMES:
            func.labels(name=fname).observe(0.01)
        for name in ("prompt_tokens", "generation_tokens", "num_requests"):
            Counter(f"sglang:{name}", name, tok, registry=reg).labels(model_name=MODEL).inc(123)
    return generate_latest(reg).decode()


def build_server_info(dep: Deployment, *, api_key: str | None = None) -> dict[str, object]:
    """A ``/server_info`` JSON body like 0.5.x's (server args + scheduler_info + states)."""
    args = {
        "model_path": MODEL,
        "served_model_name": MODEL,
        "tp_size": dep.tp_size,
        "dp_size": dep.dp_size,
        "page_size": dep.page_size,
        "mem_fraction_static": 0.88,
        "context_length": dep.context_len,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "enable_metrics": True,
        "api_key": api_key,
    }
    graph: object = (
        {"decode": 1.5, "draft_decode": 0.6} if _version_at_least(dep.version, (0, 5, 19)) else 2.1
    )
    states = [
        {
            **args,
            "last_gen_throughput": dep.gen_throughput,
            **(
                {"effective_max_running_requests_per_dp": dep.max_running_requests}
                if dep.max_running_requests is not None
                else {}
            ),
            "memory_usage": {
                "weight": 72.9,
                "kvcache": 10.42,
                "graph": graph,
                "token_capacity": dep.max_total_num_tokens,
            },
        }
        for _ in range(dep.dp_size)
    ]
    return {
        **args,
        "scheduler_info": {
            "status": "ready",
            "max_total_num_tokens": dep.max_total_num_tokens,
            "max_req_input_len": dep.context_len - 5,
        },
        "internal_states": states,
        "version": dep.version,
    }


@dataclass
class Switches:
    """Fault switches; the handler reads them on every request."""

    status: dict[str, int] = field(default_factory=dict)  # path -> forced status code
    delay_s: float = 0.0
    delay_by_path: dict[str, float] = field(default_factory=dict)  # path -> extra delay
    body: str | None = None  # None | "html" | "garbage" | "huge" | "drip"
    api_key: str | None = None  # require this Bearer key on /server_info, /get_server_info
    huge_bytes: int = 25 * 2**20
    drip_bytes: int = 8  # bytes per 0.2 s
    drip_max_s: float = 5.0
    old_endpoint_only: bool = False  # /server_info 404s, /get_server_info answers (0.4.x)


class FakeSGLang:
    """Start with ``with FakeSGLang() as sg:``; ``sg.url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, deployment: Deployment | None = None) -> None:
        self.switches = Switches()
        self.requests: list[tuple[str, dict[str, str]]] = []  # (path, headers) seen
        self.methods: list[tuple[str, str]] = []  # (method, path) of every request, GET or not
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.restart(deployment or Deployment())
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake._handle(self)

            def _refuse(self) -> None:  # SGLang's read endpoints answer nothing but GET here
                fake.methods.append((self.command, self.path.split("?", 1)[0]))
                fake._send(self, 405, b'{"detail":"Method Not Allowed"}', "application/json")

            do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _refuse

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
            # SGLang's (uvicorn's) listen backlog is 2048, not socketserver's 5: with 5, a
            # connection past it waits a second for its SYN to be sent again.
            request_queue_size = 128

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client hanging up mid-response is part of the tests

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def restart(self, deployment: Deployment) -> None:
        """Serve a new deployment (e.g. a restart with another max_total_num_tokens)."""
        exposition = build_exposition(deployment)
        with self._lock:
            self.deployment = deployment
            self.exposition = exposition.encode()
            self.server_info = json.dumps(
                build_server_info(deployment, api_key=self.switches.api_key)
            ).encode()

    def __enter__(self) -> FakeSGLang:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ---------------------------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0]
        sw = self.switches
        self.requests.append((path, {k.lower(): v for k, v in req.headers.items()}))
        self.methods.append((req.command, path))
        if sw.delay_s:
            self._stop.wait(sw.delay_s)
        if sw.delay_by_path.get(path):
            self._stop.wait(sw.delay_by_path[path])
        forced = sw.status.get(path)
        if forced is not None:
            self._send(req, forced, b"error\n", "text/plain")
            return
        if path == "/metrics":
            self._metrics(req)
        elif path in ("/server_info", "/get_server_info"):
            if path == "/server_info" and sw.old_endpoint_only:
                self._send(req, 404, b'{"detail":"Not Found"}', "application/json")
            elif sw.api_key and req.headers.get("Authorization") != f"Bearer {sw.api_key}":
                self._send(req, 401, b'{"error":"Unauthorized"}', "application/json")
            else:
                with self._lock:
                    body = self.server_info
                self._send(req, 200, body, "application/json")
        elif path == "/health":
            self._send(req, 200, b"", "text/plain")
        else:
            self._send(req, 404, b'{"detail":"Not Found"}', "application/json")

    def _metrics(self, req: BaseHTTPRequestHandler) -> None:
        sw = self.switches
        ctype = "text/plain; version=0.0.4; charset=utf-8"
        if sw.body == "html":
            page = b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>\n"
            self._send(req, 200, page, "text/html")
        elif sw.body == "garbage":
            self._send(req, 200, bytes(range(256)) * 64, "application/octet-stream")
        elif sw.body == "huge":
            chunk = b"# " + b"x" * (2**16 - 3) + b"\n"
            total = sw.huge_bytes
            # No Content-Length: the body ends when the connection closes, so the client
            # cannot refuse it up front and has to count while it streams.
            req.send_response(200)
            req.send_header("Content-Type", ctype)
            req.send_header("Connection", "close")
            req.end_headers()
            req.close_connection = True
            sent = 0
            try:
                while sent < total and not self._stop.is_set():
                    piece = chunk[: total - sent]
                    req.wfile.write(piece)
                    sent += len(piece)
            except OSError:  # the client stopped reading: expected
                req.close_connection = True
                return
        elif sw.body == "drip":
            with self._lock:
                body = self.exposition
            self._head(req, 200, ctype, len(body))
            deadline = time.monotonic() + sw.drip_max_s
            try:
                for start in range(0, len(body), sw.drip_bytes):
                    if self._stop.is_set() or time.monotonic() > deadline:
                        req.close_connection = True
                        return
                    req.wfile.write(body[start : start + sw.drip_bytes])
                    req.wfile.flush()
                    self._stop.wait(0.2)
            except OSError:
                req.close_connection = True
                return
        else:
            with self._lock:
                body = self.exposition
            self._send(req, 200, body, ctype)

    @staticmethod
    def _head(req: BaseHTTPRequestHandler, code: int, ctype: str, length: int) -> None:
        req.send_response(code)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(length))
        req.end_headers()

    def _send(self, req: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str) -> None:
        try:
            self._head(req, code, ctype, len(body))
            req.wfile.write(body)
        except OSError:
            pass
