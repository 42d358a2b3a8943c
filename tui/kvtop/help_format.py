"""`--help` laid out for the terminal it is read in: prose wrapped to its width, examples as two
columns that fold to two lines when the terminal is narrow, and usage lines of more than one form
(`kvtop ...` and `kvtop plan ...`) wrapped like argparse's own.

argparse's stock formatters either wrap everything into one paragraph (the description's line
breaks and the examples' columns are lost) or wrap nothing (a 270-character line runs off an
80-column terminal); this one keeps paragraphs and examples and wraps the rest.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterable, Sequence

# An example line in a description or epilog: two spaces, the command, a tab, what it does.
EXAMPLE_INDENT = "  "
_COLUMN_GAP = 2
_MIN_WHAT_COLUMNS = 20  # narrower than this, the explanations go on lines of their own


def examples(pairs: Iterable[tuple[str, str]]) -> str:
    """An examples paragraph: one `command<TAB>what it does` line per pair."""
    return "\n".join(f"{EXAMPLE_INDENT}{command}\t{what}" for command, what in pairs)


def _command_lines(command: str, width: int, lead: str) -> list[str]:
    """The command whole when it fits, else broken between words with the shell's ` \\`, so
    that what is copied from the terminal still runs."""
    if len(lead) + len(command) <= width:
        return [lead + command]
    lines = textwrap.wrap(
        command,
        max(width - len(lead) - 2, 10),
        break_long_words=False,
        break_on_hyphens=False,
    )
    more = " \\"
    return [
        (lead if i == 0 else lead + "    ") + line + (more if i < len(lines) - 1 else "")
        for i, line in enumerate(lines)
    ]


def _example_lines(lines: Sequence[str], width: int, indent: str) -> list[str]:
    """Commands and explanations side by side when every explanation keeps enough room beside
    the longest command, else each explanation on the lines under its command, indented."""
    pairs = [(*line.strip().split("\t", 1), "")[:2] for line in lines]
    lead = indent + EXAMPLE_INDENT
    widest = max(width - _MIN_WHAT_COLUMNS - _COLUMN_GAP - len(lead), 0)
    longest = max(len(command) for command, _ in pairs)
    side_by_side = longest <= widest
    column = len(lead) + longest + _COLUMN_GAP
    deeper = lead + EXAMPLE_INDENT * 2
    out: list[str] = []
    for command, what in pairs:
        if what and side_by_side:
            first = (lead + command).ljust(column)
            out.extend(
                textwrap.wrap(what, width, initial_indent=first, subsequent_indent=" " * column)
            )
            continue
        out.extend(_command_lines(command, width, lead))
        if what:
            out.extend(textwrap.wrap(what, width, initial_indent=deeper, subsequent_indent=deeper))
    return out


def fill(text: str, width: int, indent: str = "") -> str:
    """Each paragraph (blank-line separated) wrapped to `width`; an examples paragraph (every
    line starting with two spaces and holding a tab) laid out in columns."""
    width = max(width, 20)
    paragraphs = []
    for paragraph in text.strip("\n").split("\n\n"):
        lines = paragraph.splitlines()
        if lines and all(line.startswith(EXAMPLE_INDENT) and "\t" in line for line in lines):
            paragraphs.append("\n".join(_example_lines(lines, width, indent)))
            continue
        heading, body = "", lines
        if lines and lines[0].endswith(":") and len(lines) > 1:  # "examples:" above its block
            heading, body = f"{indent}{lines[0]}\n", lines[1:]
        if body and all(line.startswith(EXAMPLE_INDENT) and "\t" in line for line in body):
            paragraphs.append(heading + "\n".join(_example_lines(body, width, indent)))
            continue
        words = " ".join(line.strip() for line in lines)
        paragraphs.append(
            textwrap.fill(
                words,
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,  # never `--mem-` / `fraction-static`
            )
        )
    return "\n\n".join(paragraphs)


def formatter(more_usage: Sequence[str] = ()) -> type[argparse.HelpFormatter]:
    """A formatter class that wraps paragraphs with `fill` and, after argparse's own usage line,
    adds the other forms of the command (`more_usage`, each wrapped under `usage: `)."""

    class HelpFormatter(argparse.HelpFormatter):
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            return fill(text, width, indent)

        def _format_usage(
            self,
            usage: str | None,
            actions: Iterable[argparse.Action],
            groups: Iterable[argparse._MutuallyExclusiveGroup],
            prefix: str | None,
        ) -> str:
            own = super()._format_usage(usage, actions, groups, prefix).rstrip("\n")
            pad = " " * len(prefix if prefix is not None else "usage: ")
            width = max(self._width, 40)
            # argparse leaves a usage it was given, and a word longer than the line, unwrapped
            text = "\n".join(
                textwrap.fill(
                    line,
                    width,
                    subsequent_indent=pad + "    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
                if len(line) > width
                else line
                for line in own.splitlines()
            )
            for form in more_usage:
                text += "\n" + textwrap.fill(
                    form,
                    width,
                    initial_indent=pad,
                    subsequent_indent=pad + "    ",
                    break_on_hyphens=False,
                )
            return text + "\n\n"

    return HelpFormatter
