"""`kvtop --export`'s collector over real Snapshots: the real Session on the story log (Kimi-K2.5
TP8 EAGLE-3, SGLang 0.5.3–0.5.8 formats), the fake libnvidia-ml (C) through the real nvidia-ml-py
in this process (fault_host.preload_fake_nvml), and a loopback SGLang server
(tests/support/sglang_http.py) that is the log's own (version 0.5.8, so nothing mismatches) or
another one. Every number is checked against what `--once --json` (snapshot_json) and `--check`
(headroom_gib) say for the same Snapshot; the body is read back by prometheus_client's parser and
linted by promtool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kvtop.export import families as ff
from kvtop.export.collector import FAMILIES, GIB, SnapshotCollector, headroom_by_gpu, render
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.identity import FIELDS, compared_fields
from kvtop.report.check import headroom_gib
from kvtop.report.json_report import snapshot_json
from kvtop.session import Options, Session
from tests.process.test_identity_live import another_server
from tests.support.export_tools import of, one, promtool_check, samples
from tests.support.fake_nvml import STATE_ENV, eight_gpus, write_state
from tests.support.fault_host import STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang

USED_MIB = 135_700  # what the story's ranks leave in use on an H200 (NVML agrees with the log)
HOST = "gpu-node-07"
# The JSON breakdown rounds some fields to 4 decimals of a GiB: this far apart at most.
JSON_ROUNDING_BYTES = 0.00005 * GIB + 1


@pytest.fixture
def state(fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "nvml.state"
    monkeypatch.setenv(STATE_ENV, str(path))
    write_state(path, eight_gpus(used_mib=USED_MIB))
    return path


async def collect(**options: object) -> Snapshot:
    """One `--once` round of the real Session."""
    session = Session(Options(**options))  # type: ignore[arg-type]
    try:
        return await session.collect_once()
    finally:
        await session.close()


def body_of(snapshot: Snapshot | None) -> str:
    registry = CollectorRegistry()
    collector = SnapshotCollector(hostname=HOST)
    collector.latest = snapshot
    registry.register(collector)
    return generate_latest(registry).decode()


@pytest.fixture
async def ready(state: Path) -> Snapshot:
    """The story's ready server: log, 8 GPUs, its own /metrics and /server_info."""
    with FakeSGLang(Deployment(version="0.5.8")) as server:
        return await collect(log_file=str(STORY_LOG), url=server.url)


def starting_log(tmp_path: Path) -> Path:
    """The story log up to the KV cache lines: weights loaded, pools allocated, no graphs."""
    lines = STORY_LOG.read_text().splitlines(keepends=True)
    path = tmp_path / "starting.log"
    path.write_text("".join(lines[:100]))
    return path


# -- GPU memory ----------------------------------------------------------------------------------
async def test_every_segment_is_the_json_breakdown_in_bytes(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    data = snapshot_json(ready)
    gpus = data["gpus"]
    assert len(gpus) == 8  # type: ignore[arg-type]
    for gpu in gpus:  # type: ignore[union-attr]
        ids = {"gpu": str(gpu["index"]), "uuid": gpu["uuid"]}
        breakdown = gpu["breakdown"]
        assert one(found, ff.GPU_UP, **ids) == 1
        exported = {
            dict(labels)["segment"]: value
            for labels, value in of(found, ff.GPU_MEMORY, **ids).items()
        }
        expected = {}
        for segment, names in ff.SEGMENT_FIELDS.items():
            known = [breakdown[n] for n in names if breakdown[n] is not None]
            if known:
                expected[segment] = sum(known) * GIB
        # The story has no hybrid pools: no mamba segment, never a 0 for it.
        assert set(exported) == set(expected) == set(ff.SEGMENTS) - {"mamba"}
        for segment, value in expected.items():
            assert abs(exported[segment] - value) <= JSON_ROUNDING_BYTES, (gpu["index"], segment)
        total = one(found, ff.GPU_TOTAL, **ids)
        assert total == 143_771 * 2**20  # the fake card's MiB, exactly
        assert abs(total - breakdown["total_gib"] * GIB) <= JSON_ROUNDING_BYTES
        # The segments add up to the card (as the stacked bar does).
        assert abs(sum(exported.values()) - total) < 10 * JSON_ROUNDING_BYTES
        assert one(found, ff.GPU_RESERVE, **ids) == pytest.approx(
            breakdown["reserve_gib"] * GIB, abs=JSON_ROUNDING_BYTES
        )


async def test_a_lost_gpu_is_down_with_no_numbers(state: Path) -> None:
    write_state(
        state,
        eight_gpus(used_mib=USED_MIB),
        errors=[("nvmlDeviceGetMemoryInfo_v2", 3, 15)],  # NVML_ERROR_GPU_IS_LOST
    )
    snapshot = await collect(log_file=str(STORY_LOG), metrics=False)
    found = samples(body_of(snapshot))
    lost = {"gpu": "3", "uuid": "GPU-00000003-1111-2222-3333-444455556666"}
    assert one(found, ff.GPU_UP, **lost) == 0
    for family in (ff.GPU_MEMORY, ff.GPU_TOTAL, ff.GPU_RESERVE, ff.KV_HEADROOM, *SENSORS):
        assert of(found, family, gpu="3") == {}, family  # left out, never 0
        assert family == ff.KV_HEADROOM or len(of(found, family)) >= 7, family
    assert len(of(found, ff.GPU_UP)) == 8
    assert sum(of(found, ff.GPU_UP).values()) == 7
    assert len(of(found, ff.GPU_MEMORY)) == 7 * 9  # nine segments on each GPU still read
    # The GPUs source is degraded by the lost GPU: not up, its age still said.
    assert one(found, ff.SOURCE_UP, source="gpus") == 0
    assert of(found, ff.SOURCE_AGE, source="gpus")


# -- NVML's own readings: a host without DCGM is complete ------------------------------------------
SENSORS = (ff.GPU_USED, ff.GPU_TEMPERATURE, ff.GPU_POWER, ff.GPU_POWER_LIMIT, ff.GPU_UTILIZATION)


async def test_temperature_power_utilisation_and_used_memory_are_nvmls(state: Path) -> None:
    """The fake card's own numbers (eight_gpus: temp 50+i °C, power 400+i W of 700 W, util
    60+i %, used_mib + reserved_mib in use), in base units, with the other families' labels."""
    snapshot = await collect(log_file=str(STORY_LOG), metrics=False)
    found = samples(body_of(snapshot))
    for i, fields in eight_gpus(used_mib=USED_MIB).items():
        ids = {"gpu": str(i), "uuid": str(fields["uuid"])}
        assert one(found, ff.GPU_TEMPERATURE, **ids) == 50 + i
        assert one(found, ff.GPU_POWER, **ids) == pytest.approx(400 + i)
        assert one(found, ff.GPU_POWER_LIMIT, **ids) == 700
        assert one(found, ff.GPU_UTILIZATION, **ids) == pytest.approx((60 + i) / 100)
        assert one(found, ff.GPU_USED, **ids) == (USED_MIB + 512) * 2**20
        # in use + free = the card, as NVML's total - free
        free = one(found, ff.GPU_MEMORY, segment="free", **ids)
        assert one(found, ff.GPU_USED, **ids) + free == one(found, ff.GPU_TOTAL, **ids)
        named = {**ids, "name": "NVIDIA H200", "pci_bus_id": str(fields["bus"]), "vendor": "nvidia"}
        assert found[(ff.GPU_INFO, frozenset(named.items()))] == 1
    data = snapshot_json(snapshot)
    for gpu in data["gpus"]:  # type: ignore[union-attr]
        ids = {"gpu": str(gpu["index"])}
        assert one(found, ff.GPU_TEMPERATURE, **ids) == gpu["temperature_c"]
        assert one(found, ff.GPU_POWER, **ids) == pytest.approx(gpu["power_w"])
        assert one(found, ff.GPU_UTILIZATION, **ids) * 100 == pytest.approx(gpu["utilization_pct"])


async def test_readings_a_card_lacks_or_nvml_garbles_are_left_out(state: Path) -> None:
    """GPU 2 has no temperature sensor or power meter (NVML_ERROR_NOT_SUPPORTED, as on many
    consumer and passively cooled cards); GPU 5's driver hands back 0xFFFFFFFF for its
    utilisation (refused as impossible): those samples are absent, never 0, and the other
    GPUs keep theirs."""
    gpus = eight_gpus(used_mib=USED_MIB)
    gpus[5]["util"] = 4294967295
    write_state(
        state,
        gpus,
        errors=[
            ("nvmlDeviceGetTemperature", 2, 3),
            ("nvmlDeviceGetPowerUsage", 2, 3),
            ("nvmlDeviceGetEnforcedPowerLimit", 2, 3),
        ],
    )
    snapshot = await collect(log_file=str(STORY_LOG), metrics=False)
    found = samples(body_of(snapshot))
    for family in (ff.GPU_TEMPERATURE, ff.GPU_POWER, ff.GPU_POWER_LIMIT):
        assert of(found, family, gpu="2") == {}, family
        assert len(of(found, family)) == 7, family
    assert of(found, ff.GPU_UTILIZATION, gpu="5") == {}
    assert one(found, ff.GPU_UTILIZATION, gpu="2") == pytest.approx(0.62)
    assert one(found, ff.GPU_USED, gpu="2") == (USED_MIB + 512) * 2**20
    assert one(found, ff.GPU_UP, gpu="2") == one(found, ff.GPU_UP, gpu="5") == 1


async def test_a_gpus_name_from_the_driver_is_made_visible(state: Path) -> None:
    """The card's name is the driver's text: an escape sequence in it reaches no fleet view."""
    gpus = eight_gpus(used_mib=USED_MIB)
    gpus[1]["name"] = "NVIDIA H200\x1b]0;owned\x07"
    write_state(state, gpus)
    snapshot = await collect(log_file=str(STORY_LOG), metrics=False)
    (labels,) = of(samples(body_of(snapshot)), ff.GPU_INFO, gpu="1")
    name = dict(labels)["name"]
    assert name.startswith("NVIDIA H200") and "\x1b" not in name and "\x07" not in name


# -- KV cache --------------------------------------------------------------------------------------
async def test_headroom_is_what_check_calls_headroom(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    headroom = of(found, ff.KV_HEADROOM)
    assert len(headroom) == 8
    by_gpu = {dict(labels)["gpu"]: dict(labels)["rank"] for labels in headroom}
    assert by_gpu == {str(i): f"TP{i}" for i in range(8)}
    least = headroom_gib(ready)
    assert least is not None
    assert min(headroom.values()) == round(least * GIB)
    free = {g.sample.index: g.sample.free_gib for g in ready.gpus}
    for labels, value in headroom.items():
        assert value == round(free[int(dict(labels)["gpu"])] * GIB)


async def test_headroom_without_gpus_is_the_logs_reference_rank() -> None:
    snapshot = await collect(log_file=str(STORY_LOG), nvml=False, metrics=False)
    found = samples(body_of(snapshot))
    headroom = of(found, ff.KV_HEADROOM)
    assert list(headroom) == [frozenset({("gpu", ""), ("uuid", ""), ("rank", "TP0")})]
    least = headroom_gib(snapshot)
    assert least == pytest.approx(7.40, abs=0.005)  # `--check`'s headroom=7.40GB
    assert next(iter(headroom.values())) == round(least * GIB)  # type: ignore[operator]


async def test_kv_pool_and_its_prediction_per_rank(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    sizing = {s["rank"]: s for s in snapshot_json(ready)["sizing"]}  # type: ignore[union-attr]
    assert len(sizing) == 8
    for rank, row in sizing.items():
        assert one(found, ff.KV_POOL_TOKENS, rank=rank) == row["actual_tokens"] == 159_277
        assert one(found, ff.KV_POOL_PREDICTED_TOKENS, rank=rank) == row["predicted_tokens"]
    assert one(found, ff.KV_POOL_PREDICTED_TOKENS, rank="TP0") == 159_271


async def test_no_prediction_without_the_formulas_inputs(tmp_path: Path) -> None:
    """A log without its server_args line has no mem_fraction_static: the pool the ranks got
    is still exported, the prediction is left out (not 0)."""
    log = tmp_path / "no-args.log"
    log.write_text(
        "".join(
            line for line in STORY_LOG.read_text().splitlines(True) if "server_args=" not in line
        )
    )
    snapshot = await collect(log_file=str(log), nvml=False, metrics=False)
    found = samples(body_of(snapshot))
    assert len(of(found, ff.KV_POOL_TOKENS)) == 8
    assert of(found, ff.KV_POOL_PREDICTED_TOKENS) == {}


# -- startup ---------------------------------------------------------------------------------------
async def test_startup_phases_are_the_logs_durations(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    expected: dict[tuple[str, str, str], float] = {}
    for rank in snapshot_json(ready)["ranks"]:  # type: ignore[union-attr]
        for phase in rank["phases"]:
            if phase["duration_s"] is not None:
                key = (rank["rank"], phase["model"], phase["phase"])
                expected[key] = expected.get(key, 0.0) + phase["duration_s"]
    exported = {
        (d["rank"], d["model"], d["phase"]): v
        for labels, v in of(found, ff.STARTUP_PHASE_SECONDS).items()
        for d in [dict(labels)]
    }
    assert exported == pytest.approx(expected)
    assert exported[("TP0", "target", "load weights")] == 215.0
    assert exported[("TP0", "draft", "draft decode graph")] == 3.12
    assert {model for _, model, _ in exported} == {"target", "draft"}


async def test_ready_state_restarts_and_sources(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    states = {dict(labels)["state"]: v for labels, v in of(found, ff.STARTUP_STATE).items()}
    assert states == {"waiting": 0, "starting": 0, "ready": 1, "failed": 0, "stopped": 0}
    assert one(found, ff.RESTARTS) == snapshot_json(ready)["startup"]["restarts"] == 0  # type: ignore[index]
    ups = {dict(labels)["source"]: v for labels, v in of(found, ff.SOURCE_UP).items()}
    assert ups == {"log": 1, "gpus": 1, "metrics": 1}
    ages = {dict(labels)["source"]: v for labels, v in of(found, ff.SOURCE_AGE).items()}
    assert set(ages) == set(ff.SOURCES) and all(0 <= v < 60 for v in ages.values())


async def test_a_starting_server(state: Path, tmp_path: Path) -> None:
    snapshot = await collect(log_file=str(starting_log(tmp_path)), metrics=False)
    found = samples(body_of(snapshot))
    assert one(found, ff.STARTUP_STATE, state="starting") == 1
    assert one(found, ff.STARTUP_STATE, state="ready") == 0
    assert of(found, ff.KV_HEADROOM) == {}  # only once ready
    assert len(of(found, ff.KV_POOL_TOKENS)) == 8  # the pools are allocated already
    assert one(found, ff.STARTUP_PHASE_SECONDS, rank="TP0", phase="load weights") == 215.0
    # No graphs captured yet: that segment is unknown on every GPU, so left out.
    assert of(found, ff.GPU_MEMORY, segment="cuda_graphs") == {}
    assert len(of(found, ff.GPU_MEMORY, segment="kv_cache")) == 8


async def test_sources_turned_off_are_left_out() -> None:
    """--no-gpus and --no-metrics are the user's choice, not a failure: no 0 to alert on."""
    snapshot = await collect(log_file=str(STORY_LOG), nvml=False, metrics=False)
    found = samples(body_of(snapshot))
    assert {dict(labels)["source"] for labels in of(found, ff.SOURCE_UP)} == {"log"}
    for family in (ff.GPU_UP, ff.GPU_INFO, *SENSORS):
        assert of(found, family) == {}, family


async def test_a_host_without_nvml_has_no_gpu_readings(tmp_path: Path, fake_lib: Path) -> None:
    """The driver not loaded (the fake's NVML_ERROR_DRIVER_NOT_LOADED): the GPUs source is
    down and no GPU family has a sample, none sent as 0."""
    state = write_state(tmp_path / "nvml.state", {}, init_error=9)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_ENV, str(state))
        snapshot = await collect(log_file=str(STORY_LOG), metrics=False)
    found = samples(body_of(snapshot))
    assert one(found, ff.SOURCE_UP, source="gpus") == 0
    for family in (ff.GPU_UP, ff.GPU_INFO, *SENSORS):
        assert of(found, family) == {}, family


async def test_without_a_log_there_is_no_startup_state() -> None:
    with FakeSGLang(Deployment(version="0.5.8")) as server:
        snapshot = await collect(url=server.url, nvml=False)
    found = samples(body_of(snapshot))
    assert of(found, ff.STARTUP_STATE) == {} and of(found, ff.RESTARTS) == {}
    assert one(found, ff.SOURCE_UP, source="metrics") == 1


# -- identity --------------------------------------------------------------------------------------
async def test_the_logs_own_server_agrees_on_every_field_compared(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    fields = {dict(labels)["field"]: v for labels, v in of(found, ff.MISMATCH).items()}
    # The fake's /server_info has no port: not compared, so not claimed to agree.
    assert fields == dict.fromkeys(set(FIELDS) - {"port"}, 0)


async def test_another_server_is_a_mismatch_per_field() -> None:
    with another_server() as server:
        snapshot = await collect(log_file=str(STORY_LOG), url=server.url, nvml=False)
    found = samples(body_of(snapshot))
    fields = {dict(labels)["field"]: v for labels, v in of(found, ff.MISMATCH).items()}
    wrong = {m.field for m in snapshot.mismatches}
    assert wrong == {"model", "tp_size", "max_total_num_tokens", "port", "sglang_version"}
    assert {f for f, v in fields.items() if v == 1} == wrong
    # Compared by /metrics and agreeing (TP16 on one PP stage, the log's pp 1; its context
    # length); the other server's /server_info is not in the snapshot, so what only it
    # compared is not claimed to agree.
    assert {f for f, v in fields.items() if v == 0} == {"context_length", "pp_size"}


async def test_no_server_read_no_mismatch_samples() -> None:
    snapshot = await collect(log_file=str(STORY_LOG), nvml=False, metrics=False)
    assert of(samples(body_of(snapshot)), ff.MISMATCH) == {}


# -- info ------------------------------------------------------------------------------------------
async def test_info_names_the_server_and_this_host(ready: Snapshot) -> None:
    found = samples(body_of(ready))
    info = of(found, ff.INFO)
    assert len(info) == 1
    labels = dict(next(iter(info)))
    assert labels == {
        "sglang_version": "0.5.8",  # the server's own (/server_info)
        "model": "kimi-k2.5",  # --served-model-name, SGLang's model_name label
        "tp": "8",
        "dp": "1",
        "pp": "1",
        "nnodes": "1",
        "node_rank": "0",
        "disaggregation_mode": "null",  # as SGLang logs it
        "hostname": HOST,
        "dist_init_addr": "",
    }
    assert set(labels) == set(ff.INFO_LABELS)
    assert not any(name in ("host", "instance", "job") for _, lab in found for name, _ in lab)


async def test_info_from_the_log_alone_gives_its_version_range() -> None:
    snapshot = await collect(log_file=str(STORY_LOG), nvml=False, metrics=False)
    labels = dict(next(iter(of(samples(body_of(snapshot)), ff.INFO))))
    assert labels["sglang_version"] == "0.5.3–0.5.8"  # what the log's formats allow


# -- the body ----------------------------------------------------------------------------------
def test_before_the_first_snapshot_only_the_host_is_known() -> None:
    body = body_of(None)
    found = samples(body)
    assert list(found) == [
        (ff.INFO, frozenset({**dict.fromkeys(ff.INFO_LABELS, ""), "hostname": HOST}.items()))
    ]
    for name in FAMILIES:  # every family is described all the same
        assert f"# HELP {name} " in body and f"# TYPE {name} " in body
    assert promtool_check(body).returncode == 0


async def test_families_are_the_contracts_names_in_base_units(ready: Snapshot) -> None:
    families = render(ready, HOST)
    names = [
        f.name + ("_total" if f.type == "counter" else "_info" if f.type == "info" else "")
        for f in families
    ]
    assert names == list(FAMILIES)
    contract = {v for k, v in vars(ff).items() if k.isupper() and isinstance(v, str)}
    assert set(names) <= contract
    assert {ff.GPU_UP, ff.GPU_MEMORY, ff.KV_HEADROOM, ff.RESTARTS, ff.INFO} <= set(names)
    assert all(name.startswith("kvtop_") for name in names)
    for family in families:
        assert family.documentation.strip(), family.name


@pytest.mark.parametrize("which", ["ready", "starting"])
async def test_promtool_finds_nothing(which: str, state: Path, tmp_path: Path) -> None:
    if which == "ready":
        with FakeSGLang(Deployment(version="0.5.8")) as server:
            snapshot = await collect(log_file=str(STORY_LOG), url=server.url)
    else:
        snapshot = await collect(log_file=str(starting_log(tmp_path)), metrics=False)
    result = promtool_check(body_of(snapshot))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


async def test_headroom_rows_are_checks_selection(ready: Snapshot) -> None:
    rows = headroom_by_gpu(ready)
    assert min(gib for _, gib in rows) == headroom_gib(ready)


async def test_every_mismatch_field_was_compared() -> None:
    """identity.compared_fields covers what find_mismatches compares (the raw sources, before
    the session keeps another server's /server_info out of the snapshot)."""
    with another_server() as server:
        session = Session(Options(log_file=str(STORY_LOG), url=server.url, nvml=False))
        try:
            snapshot = await session.collect_once()
        finally:
            await session.close()
    startup = session.tracker.current
    compared = compared_fields(startup, session.latest_metrics, session.latest_info)
    assert {m.field for m in snapshot.mismatches} <= compared
    assert compared == set(FIELDS)  # /server_info has every one, /metrics some
    assert compared_fields(startup, None, None) == frozenset()
