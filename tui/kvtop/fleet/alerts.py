"""The fleet's alerts: one FleetHost or Deployment in, the alerts an operator should see out.

Pure, with the thresholds, levels, kinds and glyphs of the single-host rule (tui/kvtop/model/status/levels.py,
docs/alerts.md). A host whose kvtop publishes its verdict (kvtop_alert, kvtop_verdict) is
judged by it: the same alerts kvtop there shows, plus what only Prometheus can tell (targets
down, a host no longer scraped). Without it (an older kvtop, or none) the fleet judges what
Prometheus holds instead of a log:
- KV usage (sglang:token_usage × 100) against kv_usage_warning/critical_pct;
- the worst headroom (least kvtop_kv_headroom_bytes of the host's GPUs) under safe_margin_gib;
- each GPU's temperature (DCGM) against the temperature thresholds;
- kvtop's startup state: failed or stopped is critical; starting for longer than
  startup_warning_s (as far as the finished phases' seconds tell) a warning;
- a scrape target down, with Prometheus' lastError: critical for the SGLang server (a warning
  when it answers 404: no --enable-metrics), a warning for kvtop's exporter (a restart of it is
  no fault of the server's), DCGM and the node exporter;
- a host whose kvtop_info is no longer scraped (last seen a while ago): a warning;
- kvtop's own sources down (kvtop_source_up 0) and its mismatches: warnings;
- a multi-node deployment with nodes missing: a warning on the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.fleet.model import (
    AMD,
    DCGM,
    KVTOP,
    NODE,
    SGLANG,
    Deployment,
    Fleet,
    FleetHost,
    TargetState,
)
from kvtop.fleet.summary import kv_usage_pct, missing_node_ranks, worst_headroom
from kvtop.model.status import levels as alerts
from kvtop.model.status.alert_rule import pct_1
from kvtop.model.status.levels import (
    DEFAULT_THRESHOLDS,
    Alert,
    Level,
    Thresholds,
    alert_order,
    worst,
)
from kvtop.model.status.server_status import duration_text

_MAX_DETAIL = 200  # characters of Prometheus' lastError quoted in a sentence
_EXPORTER_WORDS = {
    KVTOP: "kvtop exporter",
    SGLANG: "SGLang server (/metrics)",
    DCGM: "DCGM exporter",
    AMD: "AMD device metrics exporter",
    NODE: "node exporter",
}
_CRITICAL_TARGETS = (SGLANG,)  # the server itself not answering


def _number(value: float) -> str:
    return f"{value:g}"


def _words(text: str | None) -> str:
    """Prometheus' own words, on one line, printable, not too long."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in (text or "")).split())
    return flat if len(flat) <= _MAX_DETAIL else flat[: _MAX_DETAIL - 1] + "…"


# -- one host ---------------------------------------------------------------------------------
def _state_alerts(host: FleetHost, t: Thresholds) -> list[Alert]:
    name = host.host
    if host.state == "failed":
        return [Alert(Level.CRITICAL, "startup_failed", f"{name}: the server failed (kvtop)", name)]
    if host.state == "stopped":
        return [Alert(Level.CRITICAL, "server_stopped", f"{name}: the server has stopped", name)]
    if host.state != "starting":
        return []
    running_s = startup_seconds(host)
    if running_s is None or running_s < t.startup_warning_s:
        return []
    text = (
        f"{name}: startup still in progress after at least {duration_text(running_s)} "
        f"(warning after {duration_text(t.startup_warning_s)})"
    )
    return [Alert(Level.WARNING, "startup_slow", text, name)]


def startup_seconds(host: FleetHost) -> float | None:
    """How long the startup has run at least: the slowest rank's finished phases, summed."""
    per_rank: dict[str, float] = {}
    for rank, _model, _phase, seconds in host.phases:
        per_rank[rank] = per_rank.get(rank, 0.0) + seconds
    return max(per_rank.values()) if per_rank else None


def target_alert(host: FleetHost, target: TargetState) -> Alert | None:
    """A scrape target Prometheus marks down, in words with its lastError."""
    if target.up:
        return None
    what = _EXPORTER_WORDS.get(target.exporter, f"{target.exporter} target")
    error = _words(target.error) or "no error given"
    text = f"{host.host}: {what} at {target.instance} is down (Prometheus: {error})"
    if target.exporter in _CRITICAL_TARGETS and not _not_found(target.error):
        return Alert(Level.CRITICAL, "server_down", text, host.host)
    if target.exporter == SGLANG:  # it answers, without /metrics
        text += ": the server runs without --enable-metrics; add it, or drop the scrape job"
    return Alert(Level.WARNING, "source_down", text, host.host)


def _not_found(error: str | None) -> bool:
    """Prometheus' lastError for a 404: the server answers, without /metrics."""
    return error is not None and "status 404" in error


def _kvtop_verdict_alerts(host: FleetHost) -> list[Alert]:
    """The alerts kvtop on the host publishes, in the fleet's words (the sentence with its
    numbers is kvtop's own: `kvtop --once` there)."""
    found = []
    for name, severity, subject in host.kvtop_alerts:
        level = Level.CRITICAL if severity == Level.CRITICAL else Level.WARNING
        where = f"{host.host} {_words(subject)}".strip()
        what = _words(name).replace("_", " ")
        text = f"{where}: {what} ({severity}; kvtop --once on {host.host} says why)"
        found.append(Alert(level, name, text, where))
    if host.verdict == Level.UNKNOWN:
        text = f"{host.host}: kvtop there can read none of its sources (kvtop --once says why)"
        found.append(Alert(Level.WARNING, "source_down", text, host.host))
    return found


def _target_alerts(host: FleetHost) -> list[Alert]:
    return [a for t in host.targets if (a := target_alert(host, t)) is not None]


def _stale_alerts(host: FleetHost, target_down: bool) -> list[Alert]:
    age = host.last_seen_age_s
    if age is None or target_down:
        return []  # the target's own alert says it already
    text = (
        f"{host.host}: no fresh kvtop numbers, last seen {duration_text(age)} ago "
        "(is kvtop --export still running there?)"
    )
    return [Alert(Level.WARNING, "source_down", text, host.host)]


def _source_alerts(host: FleetHost) -> list[Alert]:
    found = []
    for source, (up, age_s) in sorted(host.sources.items()):
        # SGLang serves /metrics on node 0 only (0.5.23 returns early on node_rank >= 1): the
        # other nodes' kvtop has no server to scrape, which is no fault.
        if up or (source == "metrics" and (host.node_rank or 0) >= 1):
            continue
        age = f", last read {duration_text(age_s)} ago" if age_s is not None else ""
        text = f"{host.host}: kvtop cannot read its {source} source{age}"
        found.append(Alert(Level.WARNING, "source_down", text, host.host))
    return found


def _mismatch_alerts(host: FleetHost) -> list[Alert]:
    if not host.mismatches:
        return []
    fields = ", ".join(host.mismatches)
    text = f"{host.host}: kvtop's sources disagree about {fields} (run kvtop there to see)"
    return [Alert(Level.WARNING, "mismatch", text, host.host)]


def _kv_alerts(host: FleetHost, t: Thresholds) -> list[Alert]:
    pct = kv_usage_pct(host)
    level = alerts.kv_usage_level(pct, t)
    if pct is None or level == Level.OK:
        return []
    bound = t.kv_usage_critical_pct if level == Level.CRITICAL else t.kv_usage_warning_pct
    kv = host.kv
    tokens = ""
    if kv.used_tokens is not None and kv.pool_tokens:
        tokens = f"{round(kv.used_tokens):,} of {round(kv.pool_tokens):,} tokens, "
    text = f"{host.host}: KV cache {pct_1(pct, t.kv_usage_warning_pct, t.kv_usage_critical_pct)} full ({tokens}{level} from {_number(bound)}%)"
    return [Alert(level, "kv_usage", text, host.host)]


def _headroom_alerts(host: FleetHost, t: Thresholds) -> list[Alert]:
    if host.state not in (None, "ready"):
        return []  # free memory is judged once the server is ready, as on the host itself
    room = worst_headroom(host)
    if room is None or alerts.free_after_startup_level(room.gib, t) == Level.OK:
        return []
    text = (
        f"{host.host} {room.where}: {room.gib:.2f} GiB free after startup, under the "
        f"{_number(t.safe_margin_gib)} GiB safe margin: large prefills may run out of memory"
    )
    return [Alert(Level.WARNING, "headroom", text, f"{host.host} {room.where}")]


def _lost_alerts(host: FleetHost) -> list[Alert]:
    """A GPU kvtop on the host cannot read through NVML (kvtop_gpu_up 0): critical, as on
    the host's own screen."""
    found = []
    for gpu in host.gpus:
        if gpu.lost:
            ranks = f" ({', '.join(gpu.ranks)})" if gpu.ranks else ""
            subject = f"{host.host} GPU {gpu.index}"
            text = f"{subject}{ranks} is lost: kvtop there cannot read it; check nvidia-smi and dmesg on {host.host}"
            found.append(Alert(Level.CRITICAL, "gpu_lost", text, subject))
    return found


def _temperature_alerts(host: FleetHost, t: Thresholds) -> list[Alert]:
    found = []
    for gpu in host.gpus:
        level = alerts.temperature_level(gpu.temperature_c, t)
        if level == Level.OK or gpu.temperature_c is None:
            continue
        bound = t.temperature_critical_c if level == Level.CRITICAL else t.temperature_warning_c
        subject = f"{host.host} GPU {gpu.index}"
        text = f"{subject} at {gpu.temperature_c:.0f} °C ({level} from {_number(bound)} °C)"
        found.append(Alert(level, "temperature", text, subject))
    return found


def host_alerts(host: FleetHost, t: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Alert, ...]:
    """Every alert of one host, critical first: kvtop's own verdict there when it publishes
    one, else the fleet's judgement of what Prometheus holds."""
    targets = _target_alerts(host)
    kvtop_down = any(not x.up and x.exporter == KVTOP for x in host.targets)
    if host.verdict is not None:
        found = _kvtop_verdict_alerts(host) + targets + _stale_alerts(host, kvtop_down)
        return tuple(sorted(found, key=alert_order))
    found = _state_alerts(host, t) + targets + _stale_alerts(host, kvtop_down)
    found += _source_alerts(host) + _mismatch_alerts(host) + _lost_alerts(host)
    found += _kv_alerts(host, t) + _headroom_alerts(host, t) + _temperature_alerts(host, t)
    return tuple(sorted(found, key=alert_order))


# -- a deployment and the fleet ------------------------------------------------------------
def deployment_alerts(deployment: Deployment) -> tuple[Alert, ...]:
    """The deployment's own alerts (its hosts' are host_alerts): nodes of a multi-node
    deployment that no host reports."""
    missing = missing_node_ranks(deployment)
    if not missing:
        return ()
    ranks = ", ".join(str(r) for r in missing)
    seen = deployment.nnodes - len(missing) if deployment.nnodes else 0
    text = (
        f"{deployment.model or deployment.key}: {seen} of {deployment.nnodes} nodes seen "
        f"(node_rank {ranks} missing: is kvtop --export running there, and scraped?)"
    )
    return (Alert(Level.WARNING, "source_down", text, deployment.key),)


@dataclass(frozen=True, slots=True)
class FleetAlerts:
    """Every alert of the fleet: per deployment (its own) and per host (by deployment key and
    host name: a host with two servers is in two deployments)."""

    deployments: dict[str, tuple[Alert, ...]]
    hosts: dict[tuple[str, str], tuple[Alert, ...]]

    def of_host(self, deployment: Deployment, host: FleetHost) -> tuple[Alert, ...]:
        return self.hosts.get((deployment.key, host.host), ())

    def host_level(self, deployment: Deployment, host: FleetHost) -> Level:
        return worst(a.level for a in self.of_host(deployment, host))

    def of_deployment(self, deployment: Deployment) -> tuple[Alert, ...]:
        """Its own alerts and its hosts', critical first."""
        found = list(self.deployments.get(deployment.key, ()))
        for host in deployment.hosts:
            found += self.of_host(deployment, host)
        return tuple(sorted(found, key=alert_order))

    def deployment_level(self, deployment: Deployment) -> Level:
        return worst(a.level for a in self.of_deployment(deployment))

    def everything(self) -> tuple[Alert, ...]:
        found = [a for d in self.deployments.values() for a in d]
        found += [a for h in self.hosts.values() for a in h]
        return tuple(sorted(found, key=alert_order))

    @property
    def level(self) -> Level:
        return worst(a.level for a in self.everything())


def fleet_alerts(fleet: Fleet, t: Thresholds = DEFAULT_THRESHOLDS) -> FleetAlerts:
    return FleetAlerts(
        deployments={d.key: deployment_alerts(d) for d in fleet.deployments},
        hosts={(d.key, h.host): host_alerts(h, t) for d in fleet.deployments for h in d.hosts},
    )
