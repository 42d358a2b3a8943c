"""`kvtop diff` in text and JSON (schema kvtop-diff/1): no arithmetic here, only the words
and the layout of tui/kvtop/model/boot_diff.py's comparison."""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.text import Text

from kvtop.fmt import UNKNOWN
from kvtop.model.boot_diff import BOOT_FIELDS, RANK_FIELDS, BootDiff, BootFacts, Part, RankDiff
from kvtop.report.plain_output import plain
from kvtop.report.reflow import FitColumn, FitTable, Hanging
from kvtop.report.width import report_width
from kvtop.sglang.control_chars import make_visible

SCHEMA = "kvtop-diff/1"
_UNITS = {key: unit for key, _, unit in RANK_FIELDS}
_LABELS = {key: label for key, label, _ in RANK_FIELDS}
_BOOT_LABELS = dict(BOOT_FIELDS)


def _value(value: object, unit: str = "") -> str:
    if value is None:
        return UNKNOWN
    if isinstance(value, float) and unit == "B/token":
        return f"{value:,.0f}"
    if isinstance(value, float) and unit in ("GiB", "GB"):
        return f"{value:,.2f}"
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _change(a: object, b: object, unit: str = "") -> str:
    if a == b or a is None or b is None:
        return ""
    if isinstance(a, int | float) and isinstance(b, int | float):
        delta = b - a
        if unit in ("GiB", "GB"):
            return f"{delta:+,.2f}"
        if unit == "B/token":
            return f"{delta:+,.0f}"
        if float(delta).is_integer():
            return f"{int(delta):+,}"
        return f"{delta:+g}"
    return "changed"


def _rank_names(ranks: tuple[str, ...]) -> str:
    names = [r or "(single)" for r in ranks]
    if len(names) <= 4:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]} ({len(names)} ranks)"


def _group_title(ranks: tuple[str, ...]) -> str:
    if len(ranks) == 1:
        return f"Per rank: {_rank_names(ranks)}"
    return (
        f"Per rank: {_rank_names(ranks)}, changed alike (the values are {ranks[0] or '(single)'}'s)"
    )


def _line(text: str, hang: int = 2) -> Hanging:
    return Hanging(Text(make_visible(text)), hang=hang)


def _boot_line(label: str, facts: BootFacts) -> Hanging:
    started = f", started {facts.started_at}" if facts.started_at else ""
    version = facts.boot.get("version") or "unknown"
    return _line(f"{label}: {facts.where} (SGLang {version}{started}; {facts.state})", hang=4)


def _rank_table(group: RankDiff) -> FitTable:
    table = FitTable(
        [
            FitColumn("quantity", justify="left"),
            FitColumn("A"),
            FitColumn("B"),
            FitColumn("change"),
        ],
        transpose=False,
    )
    for key, a, b in group.rows:
        if a is None and b is None:
            continue
        unit = _UNITS[key]
        table.add_row(
            Text(f"{_LABELS[key]} ({unit})"),
            Text(_value(a, unit)),
            Text(_value(b, unit)),
            Text(_change(a, b, unit)),
        )
    return table


def _parts(group: RankDiff) -> list[RenderableType]:
    if not group.parts:
        return [_line(f"  change in KV tokens: {group.unexplained}")]
    lines: list[RenderableType] = [Text("  the change in KV tokens, part by part:")]
    shown = [p for p in group.parts if p.tokens] or list(group.parts)
    for part in shown:
        mark = "  ◀ explains most" if part is group.explained_by else ""
        lines.append(_line(f"    {part.tokens:+,} tokens  {part.text}{mark}", hang=6))
    return lines


def render_diff(diff: BootDiff) -> Group:
    parts: list[RenderableType] = [
        Text("kvtop diff · two boots side by side", style="bold"),
        _boot_line("A", diff.a),
        _boot_line("B", diff.b),
        Text(""),
        _line(diff.summary),
    ]
    parts += [_line(f"note: {note}") for note in diff.notes]
    boot = FitTable(
        [FitColumn("boot", justify="left"), FitColumn("A"), FitColumn("B")], transpose=False
    )
    for key, a, b in diff.boot_rows:
        if a is None and b is None:
            continue
        boot.add_row(
            Text(_BOOT_LABELS[key]), Text(make_visible(_value(a))), Text(make_visible(_value(b)))
        )
    parts += [Text(""), boot]
    for group in diff.ranks:
        parts += [Text(""), Text(_group_title(group.ranks), style="bold")]
        parts += [_rank_table(group), *_parts(group)]
    if diff.only_a or diff.only_b:
        parts.append(Text(""))
        if diff.only_a:
            parts.append(_line(f"ranks only in A: {_rank_names(diff.only_a)}"))
        if diff.only_b:
            parts.append(_line(f"ranks only in B: {_rank_names(diff.only_b)}"))
    parts.append(Text(""))
    if diff.args_changed:
        parts.append(Text("Launch arguments that changed (A → B)", style="bold"))
        for name, a, b in diff.args_changed:
            parts.append(
                _line(
                    f"  {name}: {a if a is not None else '(not set)'} → {b if b is not None else '(not set)'}",
                    hang=4,
                )
            )
    elif diff.a.args and diff.b.args:
        parts.append(_line("Launch arguments: the same in both boots."))
    else:
        parts.append(_line("Launch arguments: a boot has no server_args line to compare."))
    return Group(*parts)


def diff_text(diff: BootDiff, width: int | None = None, ascii_only: bool = False) -> str:
    console = Console(
        file=io.StringIO(),
        width=report_width(width),
        highlight=False,
        soft_wrap=False,
        color_system=None,
        force_terminal=False,
        emoji=False,
    )
    console.print(render_diff(diff), crop=False)
    out = console.file
    assert isinstance(out, io.StringIO)
    text = "\n".join(line.rstrip() for line in out.getvalue().split("\n"))
    return plain(text) if ascii_only else text


def _part_json(part: Part) -> dict[str, object]:
    return {"factor": part.factor, "tokens": part.tokens, "text": part.text}


def _boot_json(facts: BootFacts) -> dict[str, object]:
    return {
        "where": facts.where,
        "started_at": facts.started_at,
        "state": facts.state,
        **facts.boot,
    }


def diff_json(diff: BootDiff) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "a": _boot_json(diff.a),
        "b": _boot_json(diff.b),
        "summary": diff.summary,
        "notes": list(diff.notes),
        "ranks": [
            {
                "ranks": list(group.ranks),
                "changes": [
                    {"field": key, "a": a, "b": b, "unit": _UNITS[key]}
                    for key, a, b in group.rows
                    if a != b
                ],
                "values": {key: {"a": a, "b": b} for key, a, b in group.rows},
                "tokens": {
                    "a": group.tokens_a,
                    "b": group.tokens_b,
                    "delta": (
                        group.tokens_b - group.tokens_a
                        if group.tokens_a is not None and group.tokens_b is not None
                        else None
                    ),
                    "parts": [_part_json(p) for p in group.parts],
                    "explained_by": group.explained_by.factor if group.explained_by else None,
                    "not_split": group.unexplained,
                },
            }
            for group in diff.ranks
        ],
        "ranks_only_in_a": list(diff.only_a),
        "ranks_only_in_b": list(diff.only_b),
        "server_args_changed": [{"name": n, "a": a, "b": b} for n, a, b in diff.args_changed],
    }
