"""The keys as the key bar, the help and the command palette list them, read from the views'
own bindings.

One source for the key bar, the help and the palette: a binding added to a screen or the app
(with a description for the palette and, where the description is too short, a tooltip for the
help) appears in all three with no list to keep in step. A view's bindings are its class's and
its base classes' (Textual merges them the same way); a key bound twice is the nearer class's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from rich.cells import cell_len
from textual import events
from textual.actions import parse
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# How the help writes Textual's key names.
KEY_LABELS = {
    "question_mark": "?",
    "f1": "F1",
    "down": "↓",
    "up": "↑",
    "pagedown": "PgDn",
    "pageup": "PgUp",
    "home": "Home",
    "end": "End",
    "enter": "Enter",
    "escape": "Esc",
    "plus": "+",
    "equals_sign": "=",
    "minus": "-",
    "slash": "/",
    "space": "space",
    "backspace": "Backspace",
}


def key_label(key: str) -> str:
    return KEY_LABELS.get(key, key)


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One line of the help: the keys doing one thing, what it does, and the action."""

    keys: tuple[tuple[str, ...], ...]  # per binding, its keys (labels): (("↑", "k"), ("↓", "j"))
    meaning: str
    action: str
    title: str  # the palette's name for it ("" for keys the palette does not offer)

    @property
    def keys_text(self) -> str:
        """`↑ ↓ / k j`: each binding's first key, then its alternatives."""
        columns = max(len(k) for k in self.keys)
        groups = [" ".join(k[i] for k in self.keys if len(k) > i) for i in range(columns)]
        return " / ".join(g for g in groups if g)


def _as_binding(item: BindingType) -> Binding:
    if isinstance(item, Binding):
        return item
    key, action, *rest = item
    return Binding(key, action, rest[0] if rest else "")


def _ours(base: type) -> bool:
    """kvtop's classes, and Textual's App (its ctrl+q quits every kvtop view); not Textual's
    Screen, whose Tab, Shift+Tab and copy bindings are the widgets' business."""
    return not base.__module__.startswith("textual") or base is App


def bindings_of(cls: type) -> list[Binding]:
    """`cls`'s bindings and its bases', nearest class first; a key already bound is skipped."""
    seen: set[str] = set()
    found: list[Binding] = []
    for base in filter(_ours, cls.__mro__):
        for item in base.__dict__.get("BINDINGS", ()):
            binding = _as_binding(item)
            keys = [k.strip() for k in binding.key.split(",") if k.strip()]
            free = [k for k in keys if k not in seen]
            seen.update(keys)
            if free:
                found.append(replace(binding, key=",".join(free)))
    return found


def meaning_of(binding: Binding) -> str:
    return binding.tooltip or binding.description


def palette_title(binding: Binding) -> str:
    text = binding.description
    return text[:1].upper() + text[1:]


def key_entries(bindings: Iterable[Binding]) -> list[KeyEntry]:
    """The help's lines for these bindings: bindings of one action, or of one meaning, share a
    line; a binding with neither description nor tooltip is not listed."""
    entries: list[KeyEntry] = []
    for binding in bindings:
        meaning = meaning_of(binding)
        if not meaning:
            continue
        labels = tuple(key_label(k.strip()) for k in binding.key.split(","))
        at = next(
            (
                i
                for i, e in enumerate(entries)
                if e.action == binding.action or e.meaning == meaning
            ),
            None,
        )
        if at is None:
            entries.append(KeyEntry((labels,), meaning, binding.action, palette_title(binding)))
        else:
            e = entries[at]
            entries[at] = KeyEntry((*e.keys, labels), e.meaning, e.action, e.title)
    return entries


@dataclass(frozen=True, slots=True)
class KeySection:
    """The keys of one view (or of every view: the app's), with lines no binding makes
    (mouse, a widget's own keys)."""

    title: str
    view: type
    extra: Sequence[tuple[str, str]] = ()

    def lines(self, skip: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
        """(keys, meaning) to show; `skip`: keys already listed in an earlier section."""
        bindings = [b for b in bindings_of(self.view) if not _all_in(b, skip)]
        return [(e.keys_text, e.meaning) for e in key_entries(bindings)] + list(self.extra)


def _all_in(binding: Binding, keys: frozenset[str]) -> bool:
    return all(k.strip() in keys for k in binding.key.split(","))


def all_keys(view: type) -> frozenset[str]:
    return frozenset(k.strip() for b in bindings_of(view) for k in b.key.split(","))


def palette_commands(screen: Widget, app: App[Any]) -> Iterator[SystemCommand]:
    """The palette's entries for the keys of `screen` (the view it was opened on) and of the
    app: each binding with a description, named by it, running its action where the key
    would (a key the screen binds is the screen's, as when typed)."""
    screen_bindings = bindings_of(type(screen))
    taken = all_keys(type(screen))
    app_bindings = [b for b in bindings_of(type(app)) if not _all_in(b, taken)]
    offered: set[str] = set()
    targets: tuple[tuple[Widget | App[Any], list[Binding]], ...] = (
        (screen, screen_bindings),
        (app, app_bindings),
    )
    for target, bindings in targets:
        for entry in key_entries(bindings):
            if not entry.title or entry.title in offered or not _works(target, app, entry):
                continue
            offered.add(entry.title)
            keys = entry.keys_text
            yield SystemCommand(
                entry.title, f"{entry.meaning} ({keys})", partial(target.run_action, entry.action)
            )


def _works(target: Widget | App[Any], app: App[Any], entry: KeyEntry) -> bool:
    """What the key bar would offer: the action's check_action (on the app for `app.…`)."""
    namespace, name, parameters = parse(entry.action)
    node = app if namespace == "app" else target
    return node.check_action(name, parameters) is not False


# -- the key bar ----------------------------------------------------------------------------------
# A compact key bar draws a key as `key description` with one cell after it, the palette's key
# too, at the right end behind a one-cell rule.
KEY_GAP = 1
PALETTE_RULE = 1


def _key_cells(key: FooterKey) -> int:
    description = f" {key.description}" if key.description else ""
    return cell_len(key.key_display + description)


class KeyBar(Footer):
    """Textual's compact Footer that shows only the keys that fit whole: on a narrow terminal the
    last bindings leave the bar (the help and the palette still list them), so no label is cut
    and the palette's key never lands on another's words."""

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._fitted_width = 0

    def _width(self) -> int:
        return self.size.width or (self.app.size.width if self.is_attached else 0)

    def compose(self) -> ComposeResult:
        composed = list(super().compose())
        keys = [k for k in composed if isinstance(k, FooterKey)]
        width = self._width()
        self._fitted_width = width
        if not width or len(keys) != len(composed):
            yield from composed  # nothing to measure against yet (or a group Textual lays out)
            return
        palette = [k for k in keys if k.has_class("-command-palette")]
        room = width - sum(PALETTE_RULE + _key_cells(k) + KEY_GAP for k in palette)
        if room < 0:
            palette, room = [], width  # not even the palette's key: the keys before it
        for key in keys:
            if key in palette:
                continue
            cells = _key_cells(key) + KEY_GAP
            if cells - KEY_GAP > room:
                break  # this one and every later one: whole keys, in the views' order
            room -= cells
            yield key
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._fitted_width and self._bindings_ready:
            self.call_after_refresh(self.recompose)
