"""The one-way streets of docs/architecture.md, read from the source: every import in tui/
(also those inside functions and `if TYPE_CHECKING:`) must be one its layer allows.

Data flows sources → model → views. A module that is in no layer fails the test: a new module
is placed in a layer (here and in docs/architecture.md) when it is added.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

TUI = Path(__file__).resolve().parent.parent / "tui"

# What every layer may import from tui/ (prefixes) and which outside packages it must not.
# SGLang's formats, the model and the number formats: no I/O, no terminal; anyone may use them.
PURE = ("tui.sglang", "tui.model", "tui.fmt")
NO_UI = ("textual", "rich")
NO_TEXTUAL = ("textual",)


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # the modules (prefixes) that form the layer
    may_import: tuple[str, ...]  # tui modules (prefixes) it may import
    never: tuple[str, ...] = ()  # outside packages it must not import
    exact: bool = False  # `modules` are whole names, not prefixes


LAYERS = (
    Layer("number formats", ("tui.fmt",), (), NO_UI),
    Layer("sglang", ("tui.sglang",), ("tui.sglang",), NO_UI),
    Layer("model", ("tui.model",), PURE, NO_UI),
    Layer("view state", ("tui.view_state", "tui.fleet_view_state"), PURE, NO_UI),
    Layer("report", ("tui.report",), (*PURE, "tui.report"), NO_TEXTUAL),
    Layer("sources", ("tui.sources",), (*PURE, "tui.sources"), NO_UI),
    Layer("demo", ("tui.demo",), (*PURE, "tui.demo"), NO_UI),
    Layer("server URL", ("tui.server_url",), (), NO_UI),
    Layer(
        "session",
        ("tui.session",),
        (*PURE, "tui.sources", "tui.demo", "tui.server_url"),
        NO_UI,
    ),
    # `kvtop --export`: the session headless and prometheus_client; never a terminal.
    Layer(
        "exporter",
        ("tui.export",),
        (*PURE, "tui.session", "tui.sources", "tui.report", "tui.export"),
        NO_UI,
    ),
    # The config file: pure reading; Textual only to check a theme's name.
    Layer("config file", ("tui.config",), (*PURE, "tui.server_url", "tui.saved_files"), ("rich",)),
    Layer("widgets", ("tui.widgets",), (*PURE, "tui.view_state", "tui.widgets")),
    # The fleet (issue 17): its refresh loop is a session, on the fleet's source.
    Layer("fleet feed", ("tui.fleet_feed",), (*PURE, "tui.sources"), NO_UI),
    # Screens import the interface to the app (tui.screens.base), never the app or each other.
    Layer(
        "screens",
        ("tui.screens",),
        (*PURE, "tui.view_state", "tui.fleet_view_state", "tui.widgets", "tui.screens.base"),
    ),
    Layer("terminal driver", ("tui.quiet_driver",), ()),
    # The palette's Screenshot: the SVG the app exports, written by tui.saved_files.
    Layer("screenshot file", ("tui.screenshot",), ("tui.saved_files",), NO_UI),
    # The events pane's saved view: the file named by the model, written by tui.saved_files.
    Layer("saved view", ("tui.view_file",), (*PURE, "tui.saved_files"), NO_UI),
    # The only module that writes files, when the operator asks (tests/test_read_only.py).
    Layer("saved files", ("tui.saved_files",), (), NO_UI),
    # The app runs on any SnapshotFeed: it knows neither the session nor the sources.
    Layer(
        "app",
        ("tui.app",),
        (
            *PURE,
            "tui.view_state",
            "tui.widgets",
            "tui.screens",
            "tui.quiet_driver",
            "tui.app_lifecycle",
            "tui.config",  # the palette's Save theme to config
            "tui.screenshot",
            "tui.view_file",  # the events pane's s
        ),
    ),
    # The fleet's app: like the app, on any fleet feed; it knows neither the reader nor Prometheus.
    Layer(
        "fleet app",
        ("tui.fleet_app",),
        (
            *PURE,
            "tui.view_state",
            "tui.fleet_view_state",
            "tui.widgets",
            "tui.screens",
            "tui.quiet_driver",
            "tui.app_lifecycle",
        ),
    ),
    # What both Textual apps share (stylesheet, driver, leaving on SIGHUP/SIGTERM).
    Layer("app lifecycle", ("tui.app_lifecycle",), ("tui.quiet_driver",)),
    Layer("command line", ("tui.cli", "tui.__main__", "tui.fleet_cli"), ("tui",)),
    Layer("package", ("tui", "tui.data"), (), NO_UI, exact=True),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(TUI.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = TUI.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports; `from a import b` names a.b when b is a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (write the whole name)"
            module = node.module or ""
            for alias in node.names:
                child = f"{module}.{alias.name}"
                names.add(child if _is_module(child) else module)
    return names


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_of(module: str) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.modules:
            matches = module == prefix if layer.exact else _within(module, (prefix,))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def violations(module: str, imported: set[str]) -> list[str]:
    layer = layer_of(module)
    if layer is None:
        return [f"{module} is in no layer (add it to tests/test_layers.py and the docs)"]
    found = []
    for name in sorted(imported):
        if name == "tui":
            continue  # the package root: its __version__, nothing else
        if name.startswith("tui."):
            own = _within(name, layer.modules) and layer.name != "screens"
            if not own and not _within(name, layer.may_import):
                found.append(f"{module} ({layer.name}) imports {name}")
        elif _within(name, layer.never):
            found.append(f"{module} ({layer.name}) imports {name}")
    return found


MODULES = sorted(TUI.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(TUI.parent)))
def test_imports_follow_the_layers(path: Path) -> None:
    assert violations(_module_name(path), imports_of(path)) == []


def test_the_scan_sees_the_imports_it_must_refuse() -> None:
    """The rules catch what they are for (the scan reads nested imports too)."""
    assert violations("tui.model.deployment", {"tui.sources.nvml"})
    assert violations("tui.model.history", {"textual.widget"})
    assert violations("tui.sources.nvml", {"textual.app"})
    assert violations("tui.sources.metrics", {"tui.widgets.kv_panel"})
    assert violations("tui.widgets.gpu_rows", {"tui.app"})
    assert violations("tui.widgets.gpu_rows", {"tui.screens.overview"})
    assert violations("tui.screens.overview", {"tui.app"})
    assert violations("tui.screens.overview", {"tui.screens.gpu_detail"})
    assert violations("tui.app", {"tui.sources.nvml"})
    assert violations("tui.view_state", {"textual.message"})
    assert violations("tui.fleet_app", {"tui.fleet_feed"})
    assert violations("tui.fleet_app", {"tui.sources.fleet_reader"})
    assert violations("tui.fleet_feed", {"textual.app"})
    assert violations("tui.model.fleet_alerts", {"tui.fleet_view_state"})
    assert violations("tui.brand_new", set())  # unplaced
    assert not violations("tui.screens.overview", {"tui.screens.base", "tui.view_state"})
    assert not violations("tui.sources.nvml", {"tui.model.gpu_reading"})
    nested = imports_of(TUI / "app.py")
    assert "tui.screens.gpu_detail" in nested  # imported inside a method
    assert "tui.quiet_driver" in imports_of(TUI / "app_lifecycle.py")  # inside a method too


def test_the_demo_still_is_not_in_the_package() -> None:
    """Stills are for tests, benchmarks and screenshots (tests/still.py); kvtop never runs one."""
    assert not (TUI / "demo" / "still.py").exists()
    assert not any("still" in name for p in MODULES for name in imports_of(p))
