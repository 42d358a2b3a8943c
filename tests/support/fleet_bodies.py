"""Many simulated exporters from one process: pre-rendered /metrics bodies on loopback ports.

`serve_bodies({port: body, ...})` starts one asyncio loop (in a thread) with one listener per
port, answering HTTP/1.1 keep-alive GETs of /metrics with that port's body; Prometheus
(tests/support/prometheus_server.py) scrapes them. Bodies:
- DCGM: the constructed 8-GPU exposition in dcgm-exporter's real format
  (tests/fixtures/prometheus/dcgm-exporter-8gpu.prom) with the host name, the UUIDs and the
  memory figures changed per host;
- AMD's device metrics exporter: the constructed 8 x MI300X exposition in its real format
  (tests/fixtures/prometheus/amd-device-metrics-exporter-8gpu.prom), host name and UUIDs per host;
- SGLang: tests/support/sglang_http.build_exposition (prometheus_client, SGLang's real names
  and labels: model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, dp_rank) for the model
  asked;
- node exporter: node_memory_*_bytes and node_uname_info, rendered with prometheus_client;
- kvtop: the exporter's contract (tui/kvtop/export/families.py constants, prometheus_client
  families). The real `kvtop --export` replaces these where a test runs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from kvtop.export import families as ff
from tests.support.paths import FIXTURES
from tests.support.sglang_http import MODEL as _SGLANG_FAKE_MODEL
from tests.support.sglang_http import Deployment, build_exposition

DCGM_FIXTURE = FIXTURES / "prometheus" / "dcgm-exporter-8gpu.prom"
GIB = 1024**3
MIB = 1024**2
DCGM_TOTAL_MIB = 97887  # the fixture's cards: FB_USED + FB_FREE + FB_RESERVED
DCGM_RESERVED_MIB = 604
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


# --- serving -------------------------------------------------------------------------------


class BodyServer:
    """One asyncio loop in a daemon thread; one listener per port; bodies swappable."""

    def __init__(self) -> None:
        self.bodies: dict[int, bytes] = {}
        self.requests = 0
        self._servers: dict[int, asyncio.base_events.Server] = {}
        self._writers: dict[int, set[asyncio.StreamWriter]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def serve(self, port: int, body: bytes, sock: socket.socket | None = None) -> None:
        """Answer on `port` (on `sock`, a socket bound to it, when given) with `body`."""
        self.bodies[port] = body
        if port not in self._servers:
            self._servers[port] = self._run(self._listen(port, sock))

    def set_body(self, port: int, body: bytes) -> None:
        self.bodies[port] = body

    async def _listen(self, port: int, sock: socket.socket | None) -> asyncio.base_events.Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._answer(port, reader, writer)

        if sock is not None:
            return await asyncio.start_server(handle, sock=sock)
        return await asyncio.start_server(handle, "127.0.0.1", port, reuse_address=True)

    async def _answer(self, port, reader, writer) -> None:
        self._writers.setdefault(port, set()).add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
                body = self.bodies.get(port)
                if body is None or not path.startswith(b"/metrics"):
                    writer.write(_NOT_FOUND)
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
                        b"charset=utf-8\r\nContent-Length: %d\r\n\r\n" % len(body)
                    )
                    writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._writers.get(port, set()).discard(writer)
            writer.close()

    def stop(self, port: int) -> None:
        """Close the listener on `port` (and its connections): the target goes down."""
        server = self._servers.pop(port, None)
        self.bodies.pop(port, None)
        if server is not None:
            self._run(self._close(port, server))

    async def _close(self, port: int, server: asyncio.base_events.Server) -> None:
        server.close()
        for writer in list(self._writers.pop(port, ())):  # keep-alive connections end too
            writer.close()
        await asyncio.sleep(0)

    def close(self) -> None:
        for port in list(self._servers):
            self.stop(port)
        self._run(self._cancel_rest())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _cancel_rest(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def serve_bodies(
    bodies: Mapping[int, bytes], sockets: Mapping[int, socket.socket] | None = None
) -> BodyServer:
    """Serve each port's body (all the benchmark needs); on the given bound sockets where a
    port has one (tests/support/prometheus_server.py keeps its ports bound until then)."""
    server = BodyServer()
    for port, body in bodies.items():
        server.serve(port, body, (sockets or {}).get(port))
    return server


# --- DCGM ----------------------------------------------------------------------------------


def _uuid_for(host: str, gpu: int) -> str:
    digest = hashlib.sha1(f"{host}/{gpu}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def gpu_uuids(host: str, count: int = 8) -> tuple[str, ...]:
    """The UUIDs the simulated host's GPUs have (the same in its DCGM and kvtop bodies)."""
    return tuple(_uuid_for(host, g) for g in range(count))


_DCGM_LINE = re.compile(r'^(DCGM_\w+)\{gpu="(\d)",UUID="[^"]*"(.*)\} (\S+)$')


def dcgm_body(host: str, *, used_mib: Mapping[int, int] | None = None, label="Hostname") -> bytes:
    """The fixture for `host`: its Hostname (or `hostname`, DCGM main's spelling), UUIDs from
    gpu_uuids(host), and FB_USED/FB_FREE moved so each GPU still adds up to 97,887 MiB."""
    used_mib = used_mib or {}
    out = []
    for line in DCGM_FIXTURE.read_text(encoding="utf-8").splitlines():
        found = _DCGM_LINE.match(line)
        if not found:
            out.append(line)
            continue
        name, gpu_text, rest, value = found.groups()
        gpu = int(gpu_text)
        rest = rest.replace('Hostname="gpu-node-01"', f'{label}="{host}"')
        if gpu in used_mib and name == ff.DCGM_FB_USED:
            value = str(used_mib[gpu])
        elif gpu in used_mib and name == ff.DCGM_FB_FREE:
            value = str(DCGM_TOTAL_MIB - DCGM_RESERVED_MIB - used_mib[gpu])
        out.append(f'{name}{{gpu="{gpu}",UUID="{_uuid_for(host, gpu)}"{rest}}} {value}')
    return ("\n".join(out) + "\n").encode()


# --- AMD's device metrics exporter ----------------------------------------------------------

AMD_FIXTURE = FIXTURES / "prometheus" / "amd-device-metrics-exporter-8gpu.prom"
AMD_TOTAL_MIB = 196608  # the fixture's MI300X cards: gpu_total_vram (MB as amdsmi counts them)
_AMD_UUID = re.compile(r'gpu_uuid="([^"]*)"')
_AMD_GPU_ID = re.compile(r'gpu_id="(\d+)"')


def amd_body(
    host: str, *, uuids: tuple[str, ...] | None = None, default_labels: bool = False
) -> bytes:
    """The AMD fixture for `host` (its `hostname` label); the GPUs' `gpu_uuid` replaced by
    `uuids` when given (kvtop's, to be joined by); with `default_labels` the exporter's default
    label set (no gpu_uuid, card_series, card_vendor, driver or VBIOS version)."""
    out = []
    for line in AMD_FIXTURE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("gpu_"):
            out.append(line)
            continue
        line = line.replace('hostname="mi300x-node-01"', f'hostname="{host}"')
        found = _AMD_GPU_ID.search(line)
        if found and uuids is not None:
            line = _AMD_UUID.sub(f'gpu_uuid="{uuids[int(found.group(1))]}"', line)
        if default_labels:
            for name in (
                "gpu_uuid",
                "card_series",
                "card_vendor",
                "driver_version",
                "vbios_version",
            ):
                line = re.sub(rf',{name}="[^"]*"', "", line)
        out.append(line)
    return ("\n".join(out) + "\n").encode()


# --- SGLang --------------------------------------------------------------------------------


def sglang_body(
    model: str,
    *,
    tp: int = 8,
    dp: int = 1,
    used_tokens: tuple[int, ...] = (48211,),
    total_tokens: int = 159277,
    running: int = 12,
    queued: int = 0,
    gen_throughput: float = 512.0,
    engine_type: str = "unified",
) -> bytes:
    """SGLang 0.5.23's /metrics for `model` (only attention-TP rank 0 schedulers publish)."""
    dep = Deployment(
        version="0.5.23",
        tp_size=tp,
        dp_size=dp,
        max_total_num_tokens=total_tokens,
        num_used_tokens=used_tokens,
        running=running,
        queued=queued,
        gen_throughput=gen_throughput,
    )
    text = build_exposition(dep).replace(f'"{_SGLANG_FAKE_MODEL}"', f'"{model}"')
    if engine_type != "unified":
        text = text.replace('engine_type="unified"', f'engine_type="{engine_type}"')
    return text.encode()


# --- node exporter -------------------------------------------------------------------------


class _Families:
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return self.families


def _render(families: list) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def node_body(nodename: str, *, total_bytes: float, available_bytes: float, cpus=0) -> bytes:
    """node_exporter's meminfo and uname families (and `cpus` × 8 node_cpu_seconds_total
    series, for a realistically sized body)."""
    families = []
    for field_name, value in (
        ("MemTotal", total_bytes),
        ("MemAvailable", available_bytes),
        ("MemFree", available_bytes * 0.6),
        ("Cached", available_bytes * 0.3),
        ("Buffers", 1.2 * GIB),
    ):
        families.append(
            GaugeMetricFamily(
                f"node_memory_{field_name}_bytes",
                f"Memory information field {field_name}_bytes.",
                value=value,
            )
        )
    uname = GaugeMetricFamily(
        "node_uname_info",
        "Labeled system information as provided by the uname system call.",
        labels=["domainname", "machine", "nodename", "release", "sysname", "version"],
    )
    uname.add_metric(
        ["(none)", "x86_64", nodename, "6.1.0-28-amd64", "Linux", "#1 SMP Debian 6.1.119-1"], 1
    )
    families.append(uname)
    if cpus:
        cpu = CounterMetricFamily(
            "node_cpu_seconds", "Seconds the CPUs spent in each mode.", labels=["cpu", "mode"]
        )
        modes = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
        for c in range(cpus):
            for i, mode in enumerate(modes):
                cpu.add_metric([str(c), mode], 1000.0 * (i + 1) + c)
        families.append(cpu)
    return _render(families)


# --- kvtop (the exporter's contract) -------------------------------------------------------


@dataclass
class KvtopHost:
    """What a simulated `kvtop --export` on one host reports."""

    hostname: str
    model: str = "moonshotai/Kimi-K2.5"
    sglang_version: str = "0.5.23"
    tp: int = 8
    dp: int = 1
    pp: int = 1
    nnodes: int = 1
    node_rank: int = 0
    disaggregation_mode: str = "null"
    dist_init_addr: str = ""
    state: str = "ready"
    restarts: int = 0
    gpus: int = 8
    total_bytes: float = DCGM_TOTAL_MIB * MIB
    reserve_bytes: float = 2 * GIB
    # GiB per segment on every GPU; "free" is what is left of total.
    segments_gib: Mapping[str, float] = field(
        default_factory=lambda: {
            "baseline": 0.5,
            "weights": 72.9,
            "kv_cache": 10.4,
            "cuda_graphs": 2.1,
            "runtime": 1.2,
        }
    )
    headroom_bytes: tuple[float, ...] = ()  # per GPU; default: the free segment
    pool_tokens: float = 159277
    predicted_tokens: float = 160000
    sources_up: Mapping[str, bool] = field(
        default_factory=lambda: {"gpus": True, "log": True, "metrics": True}
    )
    mismatches: Mapping[str, int] = field(default_factory=dict)
    phases: Mapping[str, float] = field(
        default_factory=lambda: {"load_weights": 95.0, "kv_cache": 12.0, "cuda_graphs": 40.0}
    )


def _segments_bytes(spec: KvtopHost) -> dict[str, float]:
    seg = {name: gib * GIB for name, gib in spec.segments_gib.items()}
    seg["free"] = spec.total_bytes - sum(seg.values())
    return seg


def kvtop_families(spec: KvtopHost) -> list:
    seg = _segments_bytes(spec)
    uuids = gpu_uuids(spec.hostname, spec.gpus)
    memory = GaugeMetricFamily(
        ff.GPU_MEMORY, "GPU memory by segment.", labels=["gpu", "uuid", "segment"]
    )
    total = GaugeMetricFamily(ff.GPU_TOTAL, "GPU memory total.", labels=["gpu", "uuid"])
    reserve = GaugeMetricFamily(ff.GPU_RESERVE, "SGLang's reserve.", labels=["gpu", "uuid"])
    headroom = GaugeMetricFamily(
        ff.KV_HEADROOM, "Free memory after startup.", labels=["gpu", "uuid", "rank"]
    )
    up = GaugeMetricFamily(ff.GPU_UP, "1 while NVML reads the GPU.", labels=["gpu", "uuid"])
    rank_base = spec.node_rank * spec.gpus
    for g, uuid in enumerate(uuids):
        ids = [str(g), uuid]
        for name in ff.SEGMENTS:
            if name in seg:
                memory.add_metric([*ids, name], seg[name])
        total.add_metric(ids, spec.total_bytes)
        reserve.add_metric(ids, spec.reserve_bytes)
        room = spec.headroom_bytes[g] if g < len(spec.headroom_bytes) else seg["free"]
        if spec.state == "ready":
            headroom.add_metric([*ids, f"TP{rank_base + g}"], room)
        up.add_metric(ids, 1)
    pool = GaugeMetricFamily(ff.KV_POOL_TOKENS, "KV pool tokens.", labels=["rank"])
    predicted = GaugeMetricFamily(ff.KV_POOL_PREDICTED_TOKENS, "Predicted.", labels=["rank"])
    pool.add_metric([f"TP{rank_base}"], spec.pool_tokens)
    predicted.add_metric([f"TP{rank_base}"], spec.predicted_tokens)
    state = GaugeMetricFamily(ff.STARTUP_STATE, "1 for the current state.", labels=["state"])
    for name in ff.STATES:
        state.add_metric([name], 1 if name == spec.state else 0)
    restarts = CounterMetricFamily(ff.RESTARTS, "Server restarts seen.", value=spec.restarts)
    source_up = GaugeMetricFamily(ff.SOURCE_UP, "1 while the source answers.", labels=["source"])
    source_age = GaugeMetricFamily(ff.SOURCE_AGE, "Age of its newest reading.", labels=["source"])
    for name in ff.SOURCES:
        if name in spec.sources_up:
            source_up.add_metric([name], 1 if spec.sources_up[name] else 0)
            source_age.add_metric([name], 0.5)
    mismatch = GaugeMetricFamily(ff.MISMATCH, "1 when sources disagree.", labels=["field"])
    for name, value in spec.mismatches.items():
        mismatch.add_metric([name], value)
    phases = GaugeMetricFamily(
        ff.STARTUP_PHASE_SECONDS, "Startup phase duration.", labels=["rank", "model", "phase"]
    )
    for name, seconds in spec.phases.items():
        phases.add_metric([f"TP{rank_base}", spec.model, name], seconds)
    info = InfoMetricFamily(ff.INFO.removesuffix("_info"), "The server kvtop watches.")
    info.add_metric(
        list(ff.INFO_LABELS),
        {
            "sglang_version": spec.sglang_version,
            "model": spec.model,
            "tp": str(spec.tp),
            "dp": str(spec.dp),
            "pp": str(spec.pp),
            "nnodes": str(spec.nnodes),
            "node_rank": str(spec.node_rank),
            "disaggregation_mode": spec.disaggregation_mode,
            "hostname": spec.hostname,
            "dist_init_addr": spec.dist_init_addr,
        },
    )
    fams = [memory, total, reserve, headroom, up, pool, predicted, state, restarts]
    return [*fams, source_up, source_age, mismatch, phases, info]


def kvtop_body(spec: KvtopHost) -> bytes:
    return _render(kvtop_families(spec))
