"""dashboards/kvtop.json, the Grafana dashboard on `kvtop --export`'s families: valid JSON, every
PromQL expression parsed by the real promtool (`check rules`), naming only families the exporter
emits (its collector's FAMILIES and the process' own process_*/python_info, read from the real
registry), SGLang's families that kvtop's own /metrics reader parses (tui/kvtop/sglang/metrics.py: each
one is in SGLang's source for the versions kvtop reads) or the DCGM and node exporter names of
tui/kvtop/export/families.py, and a panel for each view an operator looks for (KV usage, queue,
headroom, pool, phases, state, restarts, sources, GPUs, temperature, power, utilisation)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from kvtop.export import families as ff
from kvtop.export.collector import FAMILIES, SnapshotCollector
from kvtop.export.server import exporter_registry
from kvtop.model.status.levels import DEFAULT_THRESHOLDS
from kvtop.sglang.metrics import _WANTED as SGLANG_READ  # the families kvtop reads from SGLang
from tests.support.export_tools import PROMTOOL, ROOT

DASHBOARD = ROOT / "dashboards" / "kvtop.json"
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}


def dashboard() -> dict:  # type: ignore[type-arg]
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels() -> list[dict]:  # type: ignore[type-arg]
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def exprs() -> list[str]:
    """Every panel's PromQL, and the variables' queries (Grafana's `label_values(X, label)`
    reads the series X selects: X is what is checked)."""
    variables = [
        v["query"]["query"] for v in dashboard()["templating"]["list"] if v["type"] == "query"
    ]
    selected = [re.sub(r"^label_values\((.*), *\w+\)$", r"\1", q) for q in variables]
    assert all(not q.startswith("label_values") for q in selected), selected
    return [t["expr"] for p in panels() for t in p["targets"]] + selected


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (strings, label matchers, grouping
    clauses, ranges, functions and keywords taken out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end() :].lstrip()
        word = match.group(0)
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        names.add(word)
    return names


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('max by (instance, state) (kvtop_startup_state{x=~"$a"}) == 1') == {
        "kvtop_startup_state"
    }
    assert metric_names("increase(kvtop_restarts_total[1h])") == {"kvtop_restarts_total"}
    assert metric_names("(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_RESERVED) * 2^20") == {
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
    }
    assert metric_names("a or on (instance) (0 * group by (instance) (b))") == {"a", "b"}


def emitted() -> set[str]:
    """Every sample name a real exporter registry emits (before the first snapshot its kvtop
    families have no samples, so their names come from the collector's FAMILIES)."""
    registry = exporter_registry(SnapshotCollector(hostname="h"))
    names = {s.name for family in registry.collect() for s in family.samples}
    return names | set(FAMILIES)


def test_the_dashboard_is_valid_json_with_a_datasource_to_choose() -> None:
    data = dashboard()
    assert data["uid"] == "kvtop-sglang" and data["title"].startswith("kvtop")
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))


SGLANG = {f"sglang:{name}" for name in SGLANG_READ}


def test_every_expression_names_only_families_that_exist() -> None:
    others = {ff.DCGM_FB_USED, ff.DCGM_FB_FREE, ff.DCGM_FB_RESERVED, ff.DCGM_GPU_UTIL}
    others |= {ff.DCGM_GPU_TEMP, ff.DCGM_POWER, ff.NODE_MEM_TOTAL, ff.NODE_MEM_AVAILABLE}
    allowed = emitted() | others | SGLANG
    for expr in exprs():
        names = metric_names(expr)
        assert names, expr
        assert names <= allowed, (expr, names - allowed)


def test_every_family_of_the_exporter_is_on_the_dashboard() -> None:
    used = set().union(*(metric_names(e) for e in exprs()))
    assert set(FAMILIES) <= used
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= used


def test_the_memory_panel_stacks_the_segments_per_gpu() -> None:
    memory = next(p for p in panels() if p["title"].endswith("memory by segment"))
    assert memory["repeat"] == "gpu"
    assert memory["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert memory["fieldConfig"]["defaults"]["unit"] == "bytes"
    (target,) = memory["targets"]
    assert (
        metric_names(target["expr"]) == {ff.GPU_MEMORY} and target["legendFormat"] == "{{segment}}"
    )


@pytest.mark.parametrize(
    ("title", "families"),
    [
        ("KV pool: logged vs predicted", {ff.KV_POOL_TOKENS, ff.KV_POOL_PREDICTED_TOKENS}),
        ("Headroom", {ff.KV_HEADROOM}),
        ("Startup phases", {ff.STARTUP_PHASE_SECONDS}),
        ("State", {ff.STARTUP_STATE}),
        ("Restarts", {ff.RESTARTS}),
        ("Sources up", {ff.SOURCE_UP}),
        ("Source age", {ff.SOURCE_AGE}),
        ("Mismatches", {ff.MISMATCH}),
        ("GPUs up", {ff.GPU_UP}),
        ("Deployment", {ff.INFO}),
        ("KV usage", {"sglang:token_usage"}),
        ("Queue", {"sglang:num_queue_reqs", "sglang:num_running_reqs"}),
        ("Least headroom", {ff.KV_HEADROOM}),
        ("Temperature", {ff.GPU_TEMPERATURE}),
        ("Power", {ff.GPU_POWER, ff.GPU_POWER_LIMIT}),
        ("Utilisation", {ff.GPU_UTILIZATION}),
        ("Memory in use", {ff.GPU_USED, ff.GPU_TOTAL}),
    ],
)
def test_a_panel_for_each_view(title: str, families: set[str]) -> None:
    panel = next(p for p in panels() if p["title"].startswith(title))
    used = set().union(*(metric_names(t["expr"]) for t in panel["targets"]))
    assert families <= used


def test_sglang_panels_follow_the_chosen_hosts() -> None:
    """SGLang's /metrics is another target on the same machine: its panels select it by the
    `host` label of the kvtop targets chosen (a `host` variable from kvtop_info), never every
    server Prometheus scrapes."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    host = variables["host"]["query"]["query"]
    assert host == 'label_values(kvtop_info{instance=~"$instance"}, host)'
    assert variables["host"]["multi"] and variables["host"]["includeAll"]
    for panel in panels():
        for t in panel["targets"]:
            if metric_names(t["expr"]) & SGLANG:
                every = re.findall(r"sglang:\w+(\{[^}]*\})?", t["expr"])
                assert every and all(m == '{host=~"$host"}' for m in every), t["expr"]


def thresholds(title: str) -> list[float]:
    panel = next(p for p in panels() if p["title"].startswith(title))
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return [s["value"] for s in steps if s["value"] is not None]


def test_the_lines_are_kvtops_default_alert_levels() -> None:
    t = DEFAULT_THRESHOLDS
    assert thresholds("KV usage") == [t.kv_usage_warning_pct / 100, t.kv_usage_critical_pct / 100]
    assert thresholds("Temperature") == [t.temperature_warning_c, t.temperature_critical_c]
    assert thresholds("Least headroom") == [t.safe_margin_gib * 2**30]
    assert thresholds("Headroom") == [t.safe_margin_gib * 2**30]


def test_panels_do_not_overlap() -> None:
    """Grafana lays panels out by gridPos: two on one cell would hide each other."""
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for y in range(pos["y"], pos["y"] + pos["h"]):
            for x in range(pos["x"], pos["x"] + pos["w"]):
                assert (x, y) not in taken, (panel["title"], taken.get((x, y)))
                taken[(x, y)] = panel["title"]


def test_promtool_parses_every_expression(tmp_path: Path) -> None:
    """Each expression as a recording rule: `promtool check rules` parses the PromQL (the
    template variables are only inside label values, which stay strings)."""
    rules = [
        {"record": f"kvtop_dashboard:expr_{i}", "expr": expr.replace("$__rate_interval", "1m")}
        for i, expr in enumerate(exprs())
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
