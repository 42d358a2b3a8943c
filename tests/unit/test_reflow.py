"""kvtop.report.reflow: the report's tables choose wide, transposed or block layouts by the width
they get and never cut a cell; sentences wrap at words with a hanging indent."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from kvtop.report.reflow import FitColumn, FitTable, Hanging, hang, wrap_offsets


def _render(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable, crop=False)
    return console.export_text()


def _table(ranks: int = 8) -> FitTable:
    columns = [FitColumn("rank", "left"), FitColumn("pre-load\nfree"), FitColumn("weights")]
    columns += [FitColumn(f"field\n{i}") for i in range(8)]
    table = FitTable(columns, gap=1)
    for r in range(ranks):
        table.add_row(
            f"DP{r} TP{r}", f"{93 + r / 100:.2f}", "71.57", *(f"{i}.25" for i in range(8))
        )
    return table


def test_wide_when_every_column_fits() -> None:
    text = _render(_table(), 200)
    assert any(line.split()[:4] == ["DP0", "TP0", "93.00", "71.57"] for line in text.split("\n"))
    assert "…" not in text


def test_transposed_in_chunks_when_narrow() -> None:
    text = _render(_table(), 60)
    lines = text.split("\n")
    assert max(len(line.rstrip()) for line in lines) <= 60
    assert "…" not in text
    weights = [line for line in lines if line.startswith("weights ")]
    assert len(weights) >= 2  # more than one chunk
    assert sum(line.split().count("71.57") for line in weights) == 8  # every rank, whole
    assert any(line.split()[:2] == ["DP0", "DP1"] for line in lines)  # tags stacked: DP over TP


def test_blocks_when_two_records_do_not_fit() -> None:
    table = FitTable([FitColumn("GPU"), FitColumn("a very long field name for a narrow screen")])
    table.add_row("0", "95.59")
    table.add_row("1", "95.58")
    text = _render(table, 40)
    assert "…" not in text
    lines = text.split("\n")
    assert lines[0] == "0" and max(len(line) for line in lines) <= 40  # the record, then its fields
    assert "a very long field name for a narrow screen: 95.59" in " ".join(text.split())


def test_aside_column_said_once_above_a_transposed_table() -> None:
    columns = [FitColumn("GPU"), FitColumn("name", "left")] + [
        FitColumn(f"value {i}") for i in range(12)
    ]
    table = FitTable(columns, aside=1, key_prefix="GPU ")
    for gpu in range(4):
        table.add_row(str(gpu), "NVIDIA RTX PRO 6000 Blackwell Server Edition", *["1.00"] * 12)
    text = _render(table, 80)
    assert "name: NVIDIA RTX PRO 6000 Blackwell Server Edition (all 4)" in text
    assert "GPU 0" in text and "GPU 3" in text


def test_wrap_offsets_hang_and_keep_long_words() -> None:
    plain = "alpha beta gamma delta epsilon"
    assert [plain[a:b] for a, b in wrap_offsets(plain, 12, 2)] == [
        "alpha beta",
        "gamma",
        "delta",
        "epsilon",
    ]
    path = "/a/very/long/path/that/does/not/fit.log"
    line = f"read {path} now"
    assert [line[a:b] for a, b in wrap_offsets(line, 20, 2)] == [
        "read",
        path,
        "now",
    ]


def test_a_separator_never_starts_a_line() -> None:
    lines = list(Hanging(Text("kvtop report · a/path/name.log · ready")).lines(22))
    assert [line.plain for line in lines] == ["kvtop report ·", "  a/path/name.log ·", "  ready"]


def test_hanging_indent_follows_the_lines_own_indent() -> None:
    text = Text("• first words here\n  second line goes on and on")
    lines = [line.plain for line in Hanging(text).lines(16)]
    assert lines == ["• first words", "  here", "  second line", "    goes on and", "    on"]


def test_hang_reaches_into_groups_and_leaves_tables() -> None:
    from rich.console import Group

    table = _table(2)
    group = hang(Group(Text("a b"), table))
    assert isinstance(group, Group)
    first, second = group.renderables
    assert isinstance(first, Hanging) and second is table
