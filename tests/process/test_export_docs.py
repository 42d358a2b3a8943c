"""docs/exporter.md and the README's exporter section say what the exporter does: every family
is documented, the alert rules and the PromQL examples parse with the real promtool, the
systemd unit has what a service needs (restart, journal, GPUs), the README points to it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from kvtop.export import families as ff
from kvtop.export.collector import FAMILIES
from tests.support.export_tools import PROMTOOL, ROOT

DOC = (ROOT / "docs" / "exporter.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def promtool_rules(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )


def test_every_family_and_label_is_documented() -> None:
    table = DOC[DOC.index("## Families") : DOC.index("## Scraping it")]
    for name in FAMILIES:
        assert f"| `{name}` |" in table, name
    for label in ff.INFO_LABELS:
        assert f"`{label}`" in table, label
    for segment in ff.SEGMENTS:
        assert f"`{segment}`" in table, segment
    for state in ff.STATES:
        assert f"`{state}`" in table, state
    for source in ff.SOURCES:
        assert f"`{source}`" in table, source


def test_the_alert_rules_parse(tmp_path: Path) -> None:
    (rules,) = [b for b in blocks(DOC, "yaml") if "groups:" in b]
    path = tmp_path / "kvtop.yml"
    path.write_text(rules)
    result = promtool_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 4 rules found" in result.stdout


def test_the_promql_examples_parse(tmp_path: Path) -> None:
    (examples,) = blocks(DOC, "promql")
    queries: list[str] = []  # a line indented by two spaces goes on the one before
    for line in examples.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("  ") and queries:
            queries[-1] += " " + line.strip()
        else:
            queries.append(line.strip())
    rules = [{"record": f"kvtop_doc:q{i}", "expr": q} for i, q in enumerate(queries)]
    groups = [{"name": "examples", "rules": rules}]
    path = tmp_path / "examples.yml"
    path.write_text(json.dumps({"groups": groups}))
    result = promtool_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(queries) >= 8


def readme_section() -> str:
    """The README's exporter section: from its heading to the next one."""
    start = README.index("## Prometheus: `kvtop --export`")
    return README[start : README.index("\n## ", start + 1)]


def test_the_systemd_unit_has_what_a_service_needs() -> None:
    (unit,) = [b for b in blocks(DOC, "ini") if "kvtop-exporter.service" in b]
    assert "# /etc/systemd/system/kvtop-exporter.service" in unit
    for line in (
        "After=sglang-kimi.service",
        "Wants=sglang-kimi.service",
        "ExecStart=/usr/local/bin/kvtop --export --unit sglang-kimi",
        "Restart=on-failure",
        "User=kvtop",
        "SupplementaryGroups=systemd-journal",
    ):
        assert line in unit.splitlines(), line
    assert "systemd-journal" in DOC and "/dev/nvidia" in DOC  # the user's needs


def test_the_readme_names_the_exit_codes_the_default_and_the_pages() -> None:
    section = readme_section()
    assert "docs/exporter.md" in section and "dashboards/kvtop.json" in section
    assert "127.0.0.1:9877" in section
    assert "exits 0" in section and "exits 1" in section and "malformed ADDR 2" in section
