"""tui/kvtop/fleet/join.py: Prometheus' answers (as the rows FleetReader hands over) → the fleet.
Pure and quick; tests/e2e/test_fleet_reader.py checks the same against a real Prometheus."""

from __future__ import annotations

import math

import pytest

from kvtop.export import families as ff
from kvtop.fleet.join import WHAT, Readings, host_of, instance_host, join

MIB = 1024**2
GIB = 1024**3


def up(job: str, instance: str, value: float = 1.0, **labels: str):
    return ({"__name__": "up", "job": job, "instance": instance, **labels}, value)


def age(job: str, instance: str, seconds: float, **labels: str):
    return ({"job": job, "instance": instance, **labels}, seconds)


def kv(name: str, value: float, **labels: str):
    return ({"__name__": name, "job": "kvtop", **labels}, value)


def info(host: str, instance: str, **fields: str):
    base = dict.fromkeys(ff.INFO_LABELS, "")
    base.update({"model": "m", "tp": "8", "dp": "1", "pp": "1", "nnodes": "1", "node_rank": "0"})
    base.update(fields)
    return ({"job": "kvtop", "instance": instance, "host": host, **base}, 1.0)


def dcgm(name: str, gpu: int, value: float, uuid: str, **labels: str):
    return (
        {"__name__": name, "gpu": str(gpu), "UUID": uuid, "modelName": "RTX", **labels},
        value,
    )


def sglang(what: str, value: float, host: str, model: str = "m", engine: str = "unified"):
    labels = {WHAT: what, "host": host, "instance": f"{host}:30000", "model_name": model}
    return ({**labels, "engine_type": engine}, value)


def readings(**fields) -> Readings:
    return Readings(taken_at=1000.0, prometheus_url="http://prom:9090", **fields)


def test_host_comes_from_the_host_label_then_dcgm_hostname_then_instance() -> None:
    assert host_of({"host": "a", "instance": "b:1"}) == "a"
    assert host_of({"Hostname": "gpu-1", "instance": "10.0.0.5:9400"}, dcgm=True) == "gpu-1"
    assert host_of({"hostname": "gpu-2", "instance": "10.0.0.5:9400"}, dcgm=True) == "gpu-2"
    assert host_of({"hostname": "gpu-2", "instance": "10.0.0.5:9400"}) == "10.0.0.5"
    assert instance_host("[::1]:9400") == "::1"
    assert instance_host("gpu-3") == "gpu-3"


def test_a_kvtop_host_with_dcgm_sglang_and_node() -> None:
    h = {"host": "h1"}
    r = readings(
        up=(
            up("kvtop", "h1:9877", **h),
            up("dcgm", "h1:9400", **h),
            up("sglang", "h1:30000", **h),
            up("node", "h1:9100", **h),
        ),
        info=(info("h1", "h1:9877", hostname="h1.local", sglang_version="0.5.23"),),
        kvtop=(
            kv(
                ff.GPU_MEMORY,
                70 * GIB,
                gpu="0",
                uuid="GPU-a",
                segment="weights",
                instance="h1:9877",
                **h,
            ),
            kv(
                ff.GPU_MEMORY,
                5 * GIB,
                gpu="0",
                uuid="GPU-a",
                segment="free",
                instance="h1:9877",
                **h,
            ),
            kv(ff.GPU_TOTAL, 96 * GIB, gpu="0", uuid="GPU-a", instance="h1:9877", **h),
            kv(ff.GPU_RESERVE, 2 * GIB, gpu="0", uuid="GPU-a", instance="h1:9877", **h),
            kv(ff.KV_HEADROOM, 4 * GIB, gpu="0", uuid="GPU-a", rank="0", instance="h1:9877", **h),
            kv(ff.STARTUP_STATE, 0, state="starting", instance="h1:9877", **h),
            kv(ff.STARTUP_STATE, 1, state="ready", instance="h1:9877", **h),
            kv(ff.RESTARTS, 2, instance="h1:9877", **h),
            kv(ff.KV_POOL_TOKENS, 1000, rank="0", instance="h1:9877", **h),
            kv(ff.KV_POOL_PREDICTED_TOKENS, 1100, rank="0", instance="h1:9877", **h),
            kv(ff.SOURCE_UP, 1, source="gpus", instance="h1:9877", **h),
            kv(ff.SOURCE_AGE, 0.4, source="gpus", instance="h1:9877", **h),
            kv(ff.SOURCE_UP, 0, source="log", instance="h1:9877", **h),
            kv(ff.MISMATCH, 1, field="tp", instance="h1:9877", **h),
            kv(ff.MISMATCH, 0, field="model", instance="h1:9877", **h),
            kv(
                ff.STARTUP_PHASE_SECONDS,
                95,
                rank="0",
                model="m",
                phase="load_weights",
                instance="h1:9877",
                **h,
            ),
        ),
        # DCGM numbers its GPUs differently; the UUID joins them
        dcgm=(
            dcgm(ff.DCGM_FB_USED, 3, 90000, "GPU-a", instance="h1:9400", **h),
            dcgm(ff.DCGM_FB_FREE, 3, 7283, "GPU-a", instance="h1:9400", **h),
            dcgm(ff.DCGM_FB_RESERVED, 3, 604, "GPU-a", instance="h1:9400", **h),
            dcgm(ff.DCGM_GPU_UTIL, 3, 87, "GPU-a", instance="h1:9400", **h),
            dcgm(ff.DCGM_GPU_TEMP, 3, 64, "GPU-a", instance="h1:9400", **h),
            dcgm(ff.DCGM_POWER, 3, 412.5, "GPU-a", instance="h1:9400", **h),
        ),
        sglang=(
            sglang("token_usage", 0.4, "h1"),
            sglang("used_tokens", 400, "h1"),
            sglang("pool_tokens", 999, "h1"),
            sglang("running", 3, "h1"),
            sglang("queued", 1, "h1"),
            sglang("throughput", 256.0, "h1"),
        ),
        node=(
            ({"__name__": ff.NODE_MEM_TOTAL, "instance": "h1:9100", **h}, 2e12),
            ({"__name__": ff.NODE_MEM_AVAILABLE, "instance": "h1:9100", **h}, 1.5e12),
        ),
    )
    fleet = join(r)
    assert fleet.problem is None
    (d,) = fleet.deployments
    (host,) = d.hosts
    assert (d.key, d.model, d.tp, d.nnodes) == ("h1", "m", 8, 1)
    assert host.exporters == ("kvtop", "dcgm", "sglang", "node") and host.up
    assert (host.state, host.restarts, host.hostname, host.sglang_version) == (
        "ready",
        2,
        "h1.local",
        "0.5.23",
    )
    assert host.sources == {"gpus": (True, 0.4), "log": (False, None)}
    assert host.mismatches == ("tp",)
    assert host.phases == (("0", "m", "load_weights", 95.0),)
    (gpu,) = host.gpus
    assert (gpu.index, gpu.uuid, gpu.name) == (0, "GPU-a", "RTX")
    assert gpu.total_bytes == 96 * GIB  # kvtop's total wins
    assert gpu.free_bytes == 5 * GIB  # kvtop's free segment
    assert gpu.used_bytes == (90000 + 604) * MIB  # DCGM's used + reserved, in bytes
    assert gpu.segments_bytes == {"weights": 70 * GIB, "free": 5 * GIB}
    assert (gpu.reserve_bytes, gpu.headroom_bytes, gpu.ranks) == (2 * GIB, 4 * GIB, ("0",))
    assert (gpu.utilization_pct, gpu.temperature_c, gpu.power_w) == (87, 64, 412.5)
    assert host.kv.token_usage == 0.4 and host.kv.used_tokens == 400
    assert host.kv.pool_tokens == 1000  # kvtop's pool before SGLang's
    assert (host.kv.predicted_tokens, host.kv.running_reqs, host.kv.queued_reqs) == (1100, 3, 1)
    assert host.kv.gen_throughput == 256.0
    assert (host.kv.host_ram_total_bytes, host.kv.host_ram_available_bytes) == (2e12, 1.5e12)
    assert host.last_seen_age_s is None


def test_a_host_with_only_dcgm_and_sglang() -> None:
    r = readings(
        up=(up("dcgm", "10.0.0.7:9400"), up("sglang", "10.0.0.7:30000")),
        dcgm=(
            dcgm(ff.DCGM_FB_USED, 0, 89681, "GPU-x", Hostname="gpu-7", instance="10.0.0.7:9400"),
            dcgm(ff.DCGM_FB_FREE, 0, 7602, "GPU-x", Hostname="gpu-7", instance="10.0.0.7:9400"),
            dcgm(ff.DCGM_FB_RESERVED, 0, 604, "GPU-x", Hostname="gpu-7", instance="10.0.0.7:9400"),
        ),
        sglang=(
            (
                {
                    WHAT: "token_usage",
                    "instance": "10.0.0.7:30000",
                    "model_name": "qwen",
                    "engine_type": "decode",
                },
                0.2,
            ),
            (
                {
                    WHAT: "running",
                    "instance": "10.0.0.7:30000",
                    "model_name": "qwen",
                    "engine_type": "decode",
                },
                7,
            ),
        ),
    )
    hosts = {h.host: h for h in join(r).hosts}
    # no `host` label: DCGM names its node, the SGLang target only its address
    assert set(hosts) == {"gpu-7", "10.0.0.7"}
    gpu = hosts["gpu-7"].gpus[0]
    assert gpu.total_bytes == 97887 * MIB
    assert gpu.free_bytes == 7602 * MIB and gpu.used_bytes == (89681 + 604) * MIB
    assert gpu.segments_bytes == {} and gpu.headroom_bytes is None
    plain = hosts["10.0.0.7"]
    assert (plain.model, plain.disaggregation_mode, plain.state) == ("qwen", "decode", None)
    assert plain.kv.token_usage == 0.2 and plain.kv.running_reqs == 7
    assert plain.kv.pool_tokens is None and plain.kv.host_ram_total_bytes is None


def test_gpus_join_by_index_when_there_is_no_uuid() -> None:
    h = {"host": "h"}
    r = readings(
        kvtop=(kv(ff.GPU_TOTAL, 96 * GIB, gpu="1", uuid="", instance="h:1", **h),),
        dcgm=(
            dcgm(ff.DCGM_FB_USED, 1, 100, "GPU-q", instance="h:2", **h),
            dcgm(ff.DCGM_FB_FREE, 1, 200, "GPU-q", instance="h:2", **h),
            dcgm(ff.DCGM_FB_USED, 2, 300, "GPU-r", instance="h:2", **h),
            dcgm(ff.DCGM_FB_FREE, 2, 400, "GPU-r", instance="h:2", **h),
        ),
    )
    (host,) = join(r).hosts
    assert [(g.index, g.uuid) for g in host.gpus] == [(1, "GPU-q"), (2, "GPU-r")]
    assert host.gpus[0].total_bytes == 96 * GIB and host.gpus[1].total_bytes == 700 * MIB


def test_a_two_node_deployment_is_one_deployment_ordered_by_node_rank() -> None:
    addr = {"model": "kimi", "nnodes": "2", "dist_init_addr": "10.0.0.1:5000", "tp": "16"}
    other = {"model": "kimi", "nnodes": "2", "dist_init_addr": "10.0.0.9:5000"}
    r = readings(
        info=(
            info("n1", "n1:9877", node_rank="1", **addr),
            info("n0", "n0:9877", node_rank="0", **addr),
            info("x0", "x0:9877", node_rank="0", **other),
            info("solo", "solo:9877"),
        ),
        sglang=(sglang("token_usage", 0.5, "n0", model="kimi"),),
    )
    deps = {d.key: d for d in join(r).deployments}
    assert set(deps) == {"kimi@10.0.0.1:5000", "kimi@10.0.0.9:5000", "solo"}
    pair = deps["kimi@10.0.0.1:5000"]
    assert [h.host for h in pair.hosts] == ["n0", "n1"]
    assert (pair.model, pair.tp, pair.nnodes) == ("kimi", 16, 2)
    assert pair.hosts[0].kv.token_usage == 0.5 and pair.hosts[1].kv.token_usage is None


def test_down_and_stale_targets() -> None:
    h = {"host": "h"}
    r = readings(
        up=(up("kvtop", "h:9877", 0, **h), up("dcgm", "h:9400", 1, **h)),
        up_age=(age("kvtop", "h:9877", 0.5, **h), age("dcgm", "h:9400", 200.0, **h)),
        last_up_age=(age("kvtop", "h:9877", 42.0, **h),),
        targets=(
            {
                "labels": {"job": "kvtop", "instance": "h:9877", "host": "h"},
                "lastError": "connect: connection refused",
                "scrapeInterval": "15s",
            },
        ),
        info=(info("h", "h:9877"),),  # last_over_time: still known
    )
    (host,) = join(r).hosts
    kvtop, dcgm_target = sorted(host.targets, key=lambda t: t.exporter != "kvtop")
    assert (kvtop.up, kvtop.error, kvtop.last_scrape_age_s) == (
        False,
        "connect: connection refused",
        0.5,
    )
    # 200 s > 3 × 15 s: a sample from before a Prometheus restart, not a live target
    assert dcgm_target.up is False and "200 s" in dcgm_target.error
    assert not host.up and host.last_seen_age_s == 42.0 and host.model == "m"


def test_a_host_only_in_samples_from_before_a_restart_is_last_seen_then() -> None:
    h = {"host": "old"}
    r = readings(
        up=(up("dcgm", "old:9400", 1, **h),), up_age=(age("dcgm", "old:9400", 170.0, **h),)
    )
    (host,) = join(r).hosts
    assert not host.up and host.last_seen_age_s == 170.0


def test_the_selector_keeps_the_hosts_it_picked() -> None:
    r = readings(
        selector='cluster="eu"',
        selected=(up("node", "a:9100", cluster="eu"),),
        up=(up("node", "a:9100", cluster="eu"), up("dcgm", "a:9400"), up("dcgm", "b:9400")),
    )
    fleet = join(r)
    assert [h.host for h in fleet.hosts] == ["a"]
    assert {t.exporter for t in fleet.hosts[0].targets} == {"node", "dcgm"}
    assert fleet.selector == 'cluster="eu"'


@pytest.mark.parametrize(
    ("fields", "wanted"),
    [
        ({"selector": 'job="nope"'}, 'No target matches the selector job="nope"'),
        ({}, "Prometheus has no kvtop, DCGM, SGLang or node exporter targets"),
    ],
)
def test_an_empty_fleet_says_why(fields, wanted) -> None:
    fleet = join(readings(**fields))
    assert fleet.deployments == () and fleet.problem.startswith(wanted)
    assert fleet.problem.endswith(".")


def test_nan_and_inf_are_not_numbers_to_show() -> None:
    r = readings(sglang=(sglang("token_usage", math.nan, "h"), sglang("running", math.inf, "h")))
    (host,) = join(r).hosts
    assert host.kv.token_usage is None and host.kv.running_reqs is None


def test_ranks_of_a_shared_gpu_and_their_order() -> None:
    h = {"host": "h", "instance": "h:9877"}
    r = readings(
        kvtop=(
            kv(ff.KV_HEADROOM, 3 * GIB, gpu="0", uuid="GPU-a", rank="TP10,TP2", **h),
            kv(ff.KV_HEADROOM, 5 * GIB, gpu="1", uuid="GPU-b", rank="TP9", **h),
        )
    )
    (host,) = join(r).hosts
    assert [g.ranks for g in host.gpus] == [("TP2", "TP10"), ("TP9",)]
    assert [g.headroom_bytes for g in host.gpus] == [3 * GIB, 5 * GIB]


def test_a_gpu_kvtop_lost_is_lost_not_missing() -> None:
    """kvtop_gpu_up 0 (NVML on the host lost the GPU; the exporter then sends no segments):
    the GPU stays in the fleet, marked lost, with DCGM's numbers if DCGM still has it."""
    h = {"host": "h", "instance": "h:9877"}
    r = readings(
        kvtop=(
            kv(ff.GPU_UP, 1, gpu="0", uuid="GPU-a", **h),
            kv(ff.GPU_MEMORY, 10 * GIB, gpu="0", uuid="GPU-a", segment="free", **h),
            kv(ff.GPU_UP, 0, gpu="1", uuid="GPU-b", **h),
        ),
    )
    (host,) = join(r).hosts
    assert [(g.index, g.lost) for g in host.gpus] == [(0, False), (1, True)]
    assert host.gpus[1].segments_bytes == {} and host.gpus[1].free_bytes is None


def test_headroom_without_a_gpu_is_the_hosts_from_its_log() -> None:
    """kvtop there reads no GPU (--no-gpus, NVML not readable by its user): the exporter sends
    the log's headroom with gpu="" and the reference rank; the fleet keeps it for the host."""
    h = {"host": "h", "instance": "h:9877"}
    r = readings(kvtop=(kv(ff.KV_HEADROOM, 3 * GIB, gpu="", uuid="", rank="TP0", **h),))
    (host,) = join(r).hosts
    assert host.gpus == ()
    assert (host.log_headroom_bytes, host.log_headroom_rank) == (3 * GIB, "TP0")


def nvml_rows(host: str, gpu: int, uuid: str, *, temp: float, watts: float, util: float):
    """kvtop's own NVML families for one GPU, as its exporter publishes them."""
    ids = {"gpu": str(gpu), "uuid": uuid, "instance": f"{host}:9877", "host": host}
    return (
        kv(ff.GPU_TOTAL, 96 * GIB, **ids),
        kv(ff.GPU_MEMORY, 6 * GIB, segment="free", **ids),
        kv(ff.GPU_USED, 90 * GIB, **ids),
        kv(ff.GPU_TEMPERATURE, temp, **ids),
        kv(ff.GPU_POWER, watts, **ids),
        kv(ff.GPU_POWER_LIMIT, 600.0, **ids),
        kv(ff.GPU_UTILIZATION, util, **ids),
        ({"__name__": ff.GPU_INFO, "job": "kvtop", "name": "NVIDIA H200", **ids}, 1.0),
    )


def test_a_host_without_dcgm_takes_kvtops_own_gpu_readings() -> None:
    r = readings(
        up=(up("kvtop", "h2:9877", host="h2"),),
        info=(info("h2", "h2:9877"),),
        kvtop=nvml_rows("h2", 0, "GPU-b", temp=71, watts=455.5, util=0.93),
    )
    ((host,),) = (d.hosts for d in join(r).deployments)
    (gpu,) = host.gpus
    assert gpu.name == "NVIDIA H200"
    assert (gpu.utilization_pct, gpu.temperature_c, gpu.power_w, gpu.power_limit_w) == (
        93.0,
        71,
        455.5,
        600.0,
    )
    assert (gpu.total_bytes, gpu.used_bytes, gpu.free_bytes) == (96 * GIB, 90 * GIB, 6 * GIB)


def test_dcgm_comes_first_where_the_host_has_both() -> None:
    """DCGM's numbers are what the host's other dashboards show: they stay; kvtop fills in
    what DCGM lacks (the power limit; a GPU without a DCGM sample)."""
    h = {"host": "h3", "instance": "h3:9400"}
    r = readings(
        up=(up("kvtop", "h3:9877", host="h3"), up("dcgm", "h3:9400", host="h3")),
        info=(info("h3", "h3:9877"),),
        kvtop=nvml_rows("h3", 0, "GPU-c", temp=50, watts=300.0, util=0.5)
        + nvml_rows("h3", 1, "GPU-d", temp=52, watts=310.0, util=0.25),
        dcgm=(
            dcgm(ff.DCGM_GPU_TEMP, 0, 64, "GPU-c", **h),
            dcgm(ff.DCGM_POWER, 0, 412.5, "GPU-c", **h),
            dcgm(ff.DCGM_GPU_UTIL, 0, 87, "GPU-c", **h),
        ),
    )
    ((host,),) = (d.hosts for d in join(r).deployments)
    first, second = host.gpus
    assert first.name == "RTX"  # DCGM's modelName
    assert (first.utilization_pct, first.temperature_c, first.power_w) == (87, 64, 412.5)
    assert first.power_limit_w == 600.0
    assert (second.utilization_pct, second.temperature_c, second.power_w) == (25.0, 52, 310.0)


def amd(name: str, gpu: int, value: float, **labels: str):
    """A row of AMD's device metrics exporter with its default labels."""
    base = {"__name__": name, "gpu_id": str(gpu), "card_model": "102-D65209-00"}
    return ({**base, "gpu_partition_id": "0", "serial_number": "PCB0468", **labels}, value)


def test_the_amd_exporters_hostname_label_names_the_host() -> None:
    labels = {"hostname": "mi-1", "instance": "10.0.0.9:5000"}
    assert host_of(labels, amd_exporter=True) == "mi-1"
    assert host_of({"Hostname": "mi-1", "instance": "10.0.0.9:5000"}, amd_exporter=True) == (
        "10.0.0.9"  # DCGM's spelling is not AMD's
    )


def test_a_host_with_only_amds_exporter_on_mi2xx_boards() -> None:
    """An MI250X host: edge temperature and average package power (its only ones), no
    gpu_free_vram (free is then total − used), a NaN reading no reading."""
    h = {"hostname": "mi250-1", "instance": "10.0.0.9:5000"}
    r = readings(
        up=(up("amd-device-metrics-exporter", "10.0.0.9:5000", host="mi250-1"),),
        amd=(
            amd("gpu_used_vram", 0, 50000, **h),
            amd("gpu_total_vram", 0, 65536, **h),
            amd("gpu_gfx_activity", 0, 35, **h),
            amd("gpu_edge_temperature", 0, 48, **h),
            amd("gpu_average_package_power", 0, 301, **h),
            amd("gpu_power_usage", 0, math.nan, **h),
        ),
    )
    (host,) = join(r).hosts
    assert host.host == "mi250-1" and host.exporters == ("amd",)
    (gpu,) = host.gpus
    assert (gpu.index, gpu.uuid, gpu.name, gpu.readings_from) == (0, None, "102-D65209-00", "amd")
    assert (gpu.total_bytes, gpu.used_bytes) == (64 * GIB, 50000 * MIB)
    assert gpu.free_bytes == (65536 - 50000) * MIB
    assert (gpu.utilization_pct, gpu.temperature_c, gpu.power_w) == (35, 48, 301)


def test_amds_exporter_without_a_uuid_joins_kvtops_gpu_by_index() -> None:
    h = {"host": "mi-2"}
    r = readings(
        kvtop=(
            kv(ff.GPU_TOTAL, 192 * GIB, gpu="1", uuid="3dff74a1-0000-1000-80d3-0c4c1df1df58", **h),
            kv(ff.GPU_TEMPERATURE, 50, gpu="1", uuid="3dff74a1-0000-1000-80d3-0c4c1df1df58", **h),
        ),
        amd=(
            amd("gpu_used_vram", 1, 1000, **h),
            amd("gpu_free_vram", 1, 195608, **h),
            amd("gpu_junction_temperature", 1, 66, **h),
        ),
    )
    (host,) = join(r).hosts
    (gpu,) = host.gpus
    assert gpu.uuid == "3dff74a1-0000-1000-80d3-0c4c1df1df58" and gpu.readings_from == "amd"
    assert (gpu.total_bytes, gpu.used_bytes, gpu.free_bytes) == (
        192 * GIB,
        1000 * MIB,
        195608 * MIB,
    )
    assert gpu.temperature_c == 66  # AMD's exporter before kvtop's own reading, as DCGM
