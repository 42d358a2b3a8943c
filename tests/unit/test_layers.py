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

TUI = Path(__file__).resolve().parents[2] / "tui"

# What every layer may import from tui/ (prefixes) and which outside packages it must not.
# SGLang's formats, the model and the number formats: no I/O, no terminal; anyone may use them.
PURE = ("tui.sglang", "tui.model", "tui.fmt")
NO_UI = ("textual", "rich")
NO_TEXTUAL = ("textual",)
# The fleet's pure part: Prometheus' answers joined into the fleet, its alerts and numbers.
FLEET_PURE = (
    "tui.fleet.model",
    "tui.fleet.alerts",
    "tui.fleet.join",
    "tui.fleet.rows",
    "tui.fleet.summary",
    "tui.fleet.host_snapshot",
)


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # the modules (prefixes) that form the layer
    may_import: tuple[str, ...]  # tui modules (prefixes) it may import
    never: tuple[str, ...] = ()  # outside packages it must not import
    exact: bool = False  # `modules` are whole names, not prefixes


LAYERS = (
    # -- what every wing stands on ------------------------------------------------------------
    Layer("number formats", ("tui.fmt",), (), NO_UI),
    Layer("sglang", ("tui.sglang",), ("tui.sglang",), NO_UI),
    Layer("model", ("tui.model",), PURE, NO_UI),
    Layer("server URL", ("tui.server_url",), (), NO_UI),
    # The only module that writes files, when the operator asks (tests/process/test_read_only.py).
    Layer("saved files", ("tui.saved_files",), (), NO_UI),
    # The names the exporter publishes and the fleet reads back: the contract, importing nothing.
    Layer("exported names", ("tui.export.families",), (), NO_UI, exact=True),
    # -- the single host: sources → session → report -----------------------------------------
    Layer("sources", ("tui.sources",), (*PURE, "tui.sources"), NO_UI),
    Layer("demo", ("tui.demo",), (*PURE, "tui.demo", "tui.sources"), NO_UI),
    Layer(
        "session",
        ("tui.session",),
        (*PURE, "tui.sources", "tui.demo", "tui.server_url"),
        NO_UI,
    ),
    Layer("report", ("tui.report",), (*PURE, "tui.report"), NO_TEXTUAL),
    # The config file: pure reading; Textual only to check a theme's name.
    Layer("config file", ("tui.config",), (*PURE, "tui.server_url", "tui.saved_files"), ("rich",)),
    # -- the exporter wing: the session headless and prometheus_client; never a terminal -------
    Layer(
        "exporter",
        ("tui.export",),
        (*PURE, "tui.session", "tui.sources", "tui.report", "tui.export", "tui.options"),
        NO_UI,
    ),
    # -- the live wing: the app runs on any SnapshotFeed, knowing neither session nor sources ---
    Layer("live view state", ("tui.live.view_state",), PURE, NO_UI),
    Layer(
        "live widgets", ("tui.live.widgets",), (*PURE, "tui.live.view_state", "tui.live.widgets")
    ),
    # Screens import the interface to the app (screens.base), never the app or each other.
    Layer(
        "live screens",
        ("tui.live.screens",),
        (
            *PURE,
            "tui.live.view_state",
            "tui.live.widgets",
            "tui.live.screens.base",
            "tui.live.key_list",
        ),
    ),
    # The keys as the help and the palette list them, from the views' bindings: Textual only.
    Layer("key list", ("tui.live.key_list",), ()),
    Layer("terminal driver", ("tui.live.quiet_driver",), ()),
    # What both Textual apps share (stylesheet, driver, leaving on SIGHUP/SIGTERM).
    Layer("app base", ("tui.live.base",), ("tui.live.quiet_driver",)),
    # The palette's Screenshot and the events pane's saved view, written by tui.saved_files.
    Layer("screenshot file", ("tui.live.screenshot",), ("tui.saved_files",), NO_UI),
    Layer("saved view", ("tui.live.view_file",), (*PURE, "tui.saved_files"), NO_UI),
    Layer(
        "live app",
        ("tui.live.app",),
        (*PURE, "tui.live", "tui.config"),  # config: the palette's Save theme to config
    ),
    Layer("live package", ("tui.live",), (), NO_UI, exact=True),
    # -- the fleet wing: Prometheus → the fleet → its reports and its app ----------------------
    Layer("fleet package", ("tui.fleet",), (), NO_UI, exact=True),
    Layer("fleet model", FLEET_PURE, (*PURE, *FLEET_PURE, "tui.export.families"), NO_UI),
    Layer("prometheus API", ("tui.fleet.prometheus_api",), ("tui.sglang.control_chars",), NO_UI),
    Layer(
        "fleet reader",
        ("tui.fleet.reader",),
        (*PURE, *FLEET_PURE, "tui.fleet.prometheus_api", "tui.export.families"),
        NO_UI,
    ),
    # Its refresh loop: a session on the fleet's source.
    Layer(
        "fleet feed",
        ("tui.fleet.feed",),
        (*PURE, *FLEET_PURE, "tui.fleet.reader", "tui.fleet.prometheus_api"),
        NO_UI,
    ),
    Layer(
        "fleet reports",
        ("tui.fleet.check", "tui.fleet.json_report", "tui.fleet.text_report"),
        (*PURE, *FLEET_PURE, "tui.report", "tui.export.families"),
        NO_TEXTUAL,
    ),
    Layer(
        "fleet view state",
        ("tui.fleet.view_state",),
        (*PURE, *FLEET_PURE, "tui.live.view_state"),
        NO_UI,
    ),
    Layer(
        "fleet widgets",
        ("tui.fleet.table", "tui.fleet.screen"),
        (*PURE, *FLEET_PURE, "tui.fleet.view_state", "tui.fleet.table", "tui.live.widgets"),
    ),
    # The fleet's app: like the live app, on any fleet feed; it knows neither reader nor Prometheus.
    Layer(
        "fleet app",
        ("tui.fleet.app",),
        (
            *PURE,
            *FLEET_PURE,
            "tui.fleet.view_state",
            "tui.fleet.screen",
            "tui.live.base",
            "tui.live.view_state",
            "tui.live.screens.base",
            "tui.live.screens.overview",
        ),
    ),
    # `kvtop plan`: reads through the sources, computes in the model, prints no terminal UI.
    Layer("plan", ("tui.plan",), (*PURE, "tui.plan", "tui.sources", "tui.options"), NO_UI),
    # -- the command lines: the only modules that see every wing ------------------------------
    Layer("option rules", ("tui.options",), ("tui.report.width", "tui.report.unexpected"), NO_UI),
    Layer("command line", ("tui.cli", "tui.__main__", "tui.fleet.cli"), ("tui",)),
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
        return [f"{module} is in no layer (add it to tests/unit/test_layers.py and the docs)"]
    found = []
    for name in sorted(imported):
        if name == "tui":
            continue  # the package root: its __version__, nothing else
        if name.startswith("tui."):
            own = _within(name, layer.modules) and layer.name != "live screens"
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
    assert violations("tui.model.build_snapshot", {"tui.sources.nvml"})
    assert violations("tui.model.history", {"textual.widget"})
    assert violations("tui.sources.nvml", {"textual.app"})
    assert violations("tui.sources.metrics", {"tui.live.widgets.kv_panel"})
    assert violations("tui.live.widgets.gpu_rows", {"tui.live.app"})
    assert violations("tui.live.widgets.gpu_rows", {"tui.live.screens.overview"})
    assert violations("tui.live.screens.overview", {"tui.live.app"})
    assert violations("tui.live.screens.overview", {"tui.live.screens.gpu_detail"})
    assert violations("tui.live.app", {"tui.sources.nvml"})
    assert violations("tui.live.view_state", {"textual.message"})
    assert violations("tui.fleet.app", {"tui.fleet.feed"})
    assert violations("tui.fleet.app", {"tui.fleet.reader"})
    assert violations("tui.fleet.feed", {"textual.app"})
    assert violations("tui.fleet.alerts", {"tui.fleet.view_state"})
    assert violations("tui.brand_new", set())  # unplaced
    assert not violations(
        "tui.live.screens.overview", {"tui.live.screens.base", "tui.live.view_state"}
    )
    assert not violations("tui.sources.nvml", {"tui.model.memory.gpu_reading"})
    assert violations("tui.fleet.model", {"tui.fleet.reader"})
    assert violations("tui.fleet.text_report", {"textual.widgets"})
    assert violations("tui.model.status.levels", {"tui.fleet.model"})
    assert violations("tui.export.families", {"tui.model.build_snapshot"})
    nested = imports_of(TUI / "live" / "app.py")
    assert "tui.live.screens.gpu_detail" in nested  # imported inside a method
    assert "tui.live.quiet_driver" in imports_of(TUI / "live" / "base.py")  # inside a method too


def test_the_demo_still_is_not_in_the_package() -> None:
    """Stills are for tests, benchmarks and screenshots (tests/support/still.py); kvtop never runs
    one."""
    assert not (TUI / "demo" / "still.py").exists()
    assert not any("still" in name for p in MODULES for name in imports_of(p))


def import_graph() -> dict[str, set[str]]:
    """Every tui module and the tui modules it imports (also inside functions and
    `if TYPE_CHECKING:`: a circle held apart by either is still a circle)."""
    graph = {_module_name(path): imports_of(path) for path in MODULES}
    return {
        module: {name for name in imported if name in graph and name not in ("tui", module)}
        for module, imported in graph.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    # The circle that startup, failures and lifecycle once formed, held apart by TYPE_CHECKING.
    assert circles(
        {
            "tui.sglang.startup": {"tui.sglang.failures", "tui.sglang.lifecycle"},
            "tui.sglang.failures": {"tui.sglang.startup"},
            "tui.sglang.lifecycle": {"tui.sglang.startup"},
        }
    ) == [["tui.sglang.failures", "tui.sglang.lifecycle", "tui.sglang.startup"]]


# The model is pure: files and the environment are read by sources and handed in (the model's
# config.json by tui/sources/model_config_file.py, off the event loop).
READ_CALLS = {"open", "getenv"}
READ_ATTRIBUTES = {
    *READ_CALLS,
    "environ",
    "read_text",
    "read_bytes",
    "home",
    "glob",
    "iterdir",
    "stat",
    "is_dir",
    "is_file",
    "exists",
}


def reads_of(path: Path) -> set[str]:
    """The file and environment reads a module makes: open() and getenv(), and the attributes
    above (os.environ, Path.read_text, Path.home, Path.is_dir...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name) and node.id in READ_CALLS:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in READ_ATTRIBUTES:
            found.add(node.attr)
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if _within(_module_name(p), PURE)],
    ids=lambda p: str(p.relative_to(TUI.parent)),
)
def test_the_pure_layers_read_no_file_and_no_environment(path: Path) -> None:
    assert reads_of(path) == set()


def test_the_read_scan_sees_reads() -> None:
    assert reads_of(TUI / "sources" / "model_config_file.py") >= {"open", "home", "glob"}
