"""The one-way streets of docs/architecture.md, read from the source: every import in tui/kvtop/
(also those inside functions and `if TYPE_CHECKING:`) must be one its layer allows.

Data flows sources → model → views. A module that is in no layer fails the test: a new module
is placed in a layer (here and in docs/architecture.md) when it is added.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

TUI = Path(__file__).resolve().parents[2] / "tui" / "kvtop"

# What every layer may import from tui/kvtop/ (prefixes) and which outside packages it must not.
# SGLang's formats, the model and the number formats: no I/O, no terminal; anyone may use them.
PURE = ("kvtop.sglang", "kvtop.model", "kvtop.fmt")
NO_UI = ("textual", "rich")
NO_TEXTUAL = ("textual",)
# The model in four floors, each importing only those below it (and SGLang's formats, the number
# formats): plain data, the arithmetic on it, the judgement of a snapshot, and its top, which
# analyses a startup and builds the snapshot. The snapshot's own types sit between the
# arithmetic (whose results it carries) and the judgement (which reads it).
SGLANG_FMT = ("kvtop.sglang", "kvtop.fmt")
# (a) Plain types: a GPU's readings, the notes, a mismatch, levels and thresholds, the margin,
# how rows sort.
MODEL_DATA = (
    "kvtop.model.str_enum",
    "kvtop.model.safe_margin",
    "kvtop.model.column_order",
    "kvtop.model.memory.gpu_reading",
    "kvtop.model.notes",
    "kvtop.model.mismatch",
    "kvtop.model.server_target",
    "kvtop.model.status.levels",
)
# (b) Arithmetic: memory per rank and GPU, SGLang's sizing, growth rates, the startup analysed.
MODEL_ARITHMETIC = (
    "kvtop.model.memory",
    "kvtop.model.sizing",
    "kvtop.model.retractions",
    "kvtop.model.deployment_shape",
    "kvtop.model.derived_marks",
    "kvtop.model.startup_analysis",
    "kvtop.model.boot_diff",
)
# What one refresh holds: the Snapshot, its verdict and timeline entries, a process's record.
MODEL_SNAPSHOT = ("kvtop.model.snapshot", "kvtop.model.verdict", "kvtop.model.processes.record")
# (c) The judgement, and what reads a snapshot for the views (usage, history, the process table).
MODEL_JUDGEMENT = (
    "kvtop.model.status",
    "kvtop.model.kv_usage",
    "kvtop.model.state_pool",
    "kvtop.model.history",
    "kvtop.model.binding_limit",
    "kvtop.model.timeline",
    "kvtop.model.event_view",
    "kvtop.model.processes",
    "kvtop.model.memory.gpu_detail",
    "kvtop.model.memory.gpu_order",
    "kvtop.model.memory.headroom",
)
# (d) The top: a startup analysed (analysis.analyse) and the Snapshot built.
MODEL_TOP = ("kvtop.model", "kvtop.model.analysis", "kvtop.model.build_snapshot")
# The fleet's pure part: Prometheus' answers joined into the fleet, its alerts and numbers.
FLEET_PURE = (
    "kvtop.fleet.model",
    "kvtop.fleet.amd_families",
    "kvtop.fleet.alerts",
    "kvtop.fleet.join",
    "kvtop.fleet.rows",
    "kvtop.fleet.summary",
    "kvtop.fleet.host_snapshot",
)


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # the modules (prefixes) that form the layer
    may_import: tuple[str, ...]  # kvtop modules (prefixes) it may import
    never: tuple[str, ...] = ()  # outside packages it must not import
    exact: bool = False  # `modules` are whole names, not prefixes
    # Layers (by name) or kvtop modules (prefixes) it must not import, though within may_import.
    refused: tuple[str, ...] = ()


LAYERS = (
    # -- what every wing stands on ------------------------------------------------------------
    Layer("number formats", ("kvtop.fmt",), (), NO_UI),
    Layer("sglang", ("kvtop.sglang",), ("kvtop.sglang",), NO_UI),
    Layer("model data", MODEL_DATA, (*SGLANG_FMT, *MODEL_DATA), NO_UI),
    Layer("model arithmetic", MODEL_ARITHMETIC, (*SGLANG_FMT, *MODEL_DATA), NO_UI),
    Layer(
        "model snapshot",
        MODEL_SNAPSHOT,
        (*SGLANG_FMT, *MODEL_DATA, *MODEL_ARITHMETIC),
        NO_UI,
    ),
    Layer(
        "model judgement",
        MODEL_JUDGEMENT,
        (*SGLANG_FMT, *MODEL_DATA, *MODEL_ARITHMETIC, *MODEL_SNAPSHOT),
        NO_UI,
    ),
    Layer("model top", MODEL_TOP, PURE, NO_UI, exact=True),
    Layer("server URL", ("kvtop.server_url",), (), NO_UI),
    # The only module that writes files, when the operator asks (tests/process/test_read_only.py).
    Layer("saved files", ("kvtop.saved_files",), (), NO_UI),
    # `--help` laid out for the terminal: argparse only.
    Layer("help layout", ("kvtop.help_format",), (), NO_UI),
    # The names the exporter publishes and the fleet reads back: the contract, importing nothing.
    Layer("exported names", ("kvtop.export.families",), (), NO_UI, exact=True),
    # -- the single host: sources → session → report -----------------------------------------
    # Sources read; they judge nothing: nothing of the judgement's floor or the model's top, and
    # nothing of kvtop.model.status (not even its levels).
    Layer(
        "sources",
        ("kvtop.sources",),
        (*PURE, "kvtop.sources"),
        NO_UI,
        refused=("model judgement", "model top", "kvtop.model.status"),
    ),
    Layer("demo", ("kvtop.demo",), (*PURE, "kvtop.demo", "kvtop.sources"), NO_UI),
    # What a session is asked to read, and the first frame's GPUs: formed before the live view's
    # first frame, so light, and below the session.
    Layer(
        "session options", ("kvtop.session_options",), (*PURE, "kvtop.sources", "kvtop.demo"), NO_UI
    ),
    Layer("first frame's GPUs", ("kvtop.early_gpus",), (*PURE, "kvtop.sources"), NO_UI),
    Layer(
        "session",
        ("kvtop.session",),
        (*PURE, "kvtop.sources", "kvtop.demo", "kvtop.server_url", "kvtop.session_options"),
        NO_UI,
        exact=True,
    ),
    Layer("report", ("kvtop.report",), (*PURE, "kvtop.report"), NO_TEXTUAL),
    # The config file: pure reading; Textual only to check a theme's name.
    Layer(
        "config file",
        ("kvtop.config",),
        (*PURE, "kvtop.server_url", "kvtop.saved_files"),
        ("rich",),
    ),
    # -- the exporter wing: the session headless and prometheus_client; never a terminal -------
    Layer(
        "exporter",
        ("kvtop.export",),
        (*PURE, "kvtop.session", "kvtop.sources", "kvtop.report", "kvtop.export", "kvtop.options"),
        NO_UI,
    ),
    # -- the live wing: the app runs on any SnapshotFeed, knowing neither session nor sources ---
    Layer("live view state", ("kvtop.live.view_state",), PURE, NO_UI),
    Layer(
        "live widgets",
        ("kvtop.live.widgets",),
        (*PURE, "kvtop.live.view_state", "kvtop.live.widgets"),
    ),
    # Screens import the interface to the app (screens.base), never the app or each other.
    Layer(
        "live screens",
        ("kvtop.live.screens",),
        (
            *PURE,
            "kvtop.live.view_state",
            "kvtop.live.widgets",
            "kvtop.live.screens.base",
            "kvtop.live.key_list",
        ),
    ),
    # The keys as the help and the palette list them, from the views' bindings: Textual only.
    Layer("key list", ("kvtop.live.key_list",), ()),
    Layer("terminal driver", ("kvtop.live.quiet_driver",), ()),
    # What both Textual apps share (stylesheet, driver, leaving on SIGHUP/SIGTERM).
    Layer("app base", ("kvtop.live.base",), ("kvtop.live.quiet_driver",)),
    # The palette's Screenshot and the events pane's saved view, written by kvtop.saved_files.
    Layer("screenshot file", ("kvtop.live.screenshot",), ("kvtop.saved_files",), NO_UI),
    Layer("saved view", ("kvtop.live.view_file",), (*PURE, "kvtop.saved_files"), NO_UI),
    Layer(
        "live app",
        ("kvtop.live.app",),
        (*PURE, "kvtop.live", "kvtop.config"),  # config: the palette's Save theme to config
    ),
    Layer("live package", ("kvtop.live",), (), NO_UI, exact=True),
    # -- the fleet wing: Prometheus → the fleet → its reports and its app ----------------------
    Layer("fleet package", ("kvtop.fleet",), (), NO_UI, exact=True),
    Layer("fleet model", FLEET_PURE, (*PURE, *FLEET_PURE, "kvtop.export.families"), NO_UI),
    Layer(
        "prometheus API", ("kvtop.fleet.prometheus_api",), ("kvtop.sglang.control_chars",), NO_UI
    ),
    Layer(
        "fleet reader",
        ("kvtop.fleet.reader",),
        (*PURE, *FLEET_PURE, "kvtop.fleet.prometheus_api", "kvtop.export.families"),
        NO_UI,
    ),
    # Its refresh loop: a session on the fleet's source.
    Layer(
        "fleet feed",
        ("kvtop.fleet.feed",),
        (*PURE, *FLEET_PURE, "kvtop.fleet.reader", "kvtop.fleet.prometheus_api"),
        NO_UI,
    ),
    Layer(
        "fleet reports",
        ("kvtop.fleet.check", "kvtop.fleet.json_report", "kvtop.fleet.text_report"),
        (*PURE, *FLEET_PURE, "kvtop.report", "kvtop.export.families"),
        NO_TEXTUAL,
    ),
    Layer(
        "fleet view state",
        ("kvtop.fleet.view_state",),
        (*PURE, *FLEET_PURE, "kvtop.live.view_state"),
        NO_UI,
    ),
    Layer(
        "fleet widgets",
        ("kvtop.fleet.table", "kvtop.fleet.screen"),
        (*PURE, *FLEET_PURE, "kvtop.fleet.view_state", "kvtop.fleet.table", "kvtop.live.widgets"),
    ),
    # The fleet's app: like the live app, on any fleet feed; it knows neither reader nor Prometheus.
    Layer(
        "fleet app",
        ("kvtop.fleet.app",),
        (
            *PURE,
            *FLEET_PURE,
            "kvtop.fleet.view_state",
            "kvtop.fleet.screen",
            "kvtop.live.base",
            "kvtop.live.view_state",
            "kvtop.live.screens.base",
            "kvtop.live.screens.overview",
        ),
    ),
    # `kvtop plan`: reads through the sources, computes in the model, prints its text through
    # the one-shot reports' layer (width, ASCII, reflowing tables); no terminal UI.
    Layer(
        "plan",
        ("kvtop.plan",),
        (
            *PURE,
            "kvtop.plan",
            "kvtop.sources",
            "kvtop.options",
            "kvtop.option_rules",
            "kvtop.help_format",
            "kvtop.report",
        ),
        NO_TEXTUAL,
    ),
    # `kvtop diff`: the same shape as the plan: boots read through the sources, compared in
    # the model, printed through the one-shot reports' layer.
    Layer(
        "diff",
        ("kvtop.diff",),
        (
            *PURE,
            "kvtop.diff",
            "kvtop.sources",
            "kvtop.options",
            "kvtop.option_rules",
            "kvtop.help_format",
            "kvtop.report",
        ),
        NO_TEXTUAL,
    ),
    # -- the command lines: the only modules that see every wing ------------------------------
    Layer(
        "option rules", ("kvtop.options",), ("kvtop.report.width", "kvtop.report.unexpected"), NO_UI
    ),
    # Which options go together, for every command: its tables, their sentences, one check.
    Layer(
        "option table",
        ("kvtop.option_rules",),
        (*PURE, "kvtop.options", "kvtop.server_url", "kvtop.report.width", "kvtop.export.address"),
        NO_UI,
    ),
    Layer("command line", ("kvtop.cli", "kvtop.__main__", "kvtop.fleet.cli"), ("kvtop",)),
    Layer("package", ("kvtop", "kvtop.data"), (), NO_UI, exact=True),
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
        if name == "kvtop":
            continue  # the package root: its __version__, nothing else
        if name.startswith("kvtop."):
            own = _within(name, layer.modules) and layer.name != "live screens"
            theirs = layer_of(name)
            refused = _within(name, layer.refused) or (
                theirs is not None and theirs.name in layer.refused
            )
            if refused or (not own and not _within(name, layer.may_import)):
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
    assert violations("kvtop.model.build_snapshot", {"kvtop.sources.nvml"})
    assert violations("kvtop.model.history", {"textual.widget"})
    assert violations("kvtop.sources.nvml", {"textual.app"})
    assert violations("kvtop.sources.metrics", {"kvtop.live.widgets.kv_panel"})
    assert violations("kvtop.live.widgets.gpu_rows", {"kvtop.live.app"})
    assert violations("kvtop.live.widgets.gpu_rows", {"kvtop.live.screens.overview"})
    assert violations("kvtop.live.screens.overview", {"kvtop.live.app"})
    assert violations("kvtop.live.screens.overview", {"kvtop.live.screens.gpu_detail"})
    assert violations("kvtop.live.app", {"kvtop.sources.nvml"})
    assert violations("kvtop.live.view_state", {"textual.message"})
    assert violations("kvtop.fleet.app", {"kvtop.fleet.feed"})
    assert violations("kvtop.fleet.app", {"kvtop.fleet.reader"})
    assert violations("kvtop.fleet.feed", {"textual.app"})
    assert violations("kvtop.fleet.alerts", {"kvtop.fleet.view_state"})
    assert violations("kvtop.brand_new", set())  # unplaced
    assert not violations(
        "kvtop.live.screens.overview", {"kvtop.live.screens.base", "kvtop.live.view_state"}
    )
    assert not violations("kvtop.sources.nvml", {"kvtop.model.memory.gpu_reading"})
    assert violations("kvtop.fleet.model", {"kvtop.fleet.reader"})
    assert violations("kvtop.fleet.text_report", {"textual.widgets"})
    assert violations("kvtop.model.status.levels", {"kvtop.fleet.model"})
    assert violations("kvtop.export.families", {"kvtop.model.build_snapshot"})
    # The model's floors: each imports only those below it.
    assert violations("kvtop.model.snapshot", {"kvtop.model.status.verdict"})
    assert violations("kvtop.model.snapshot", {"kvtop.model.analysis"})
    assert violations("kvtop.model.status.levels", {"kvtop.model.sizing.replay"})
    assert violations("kvtop.model.notes", {"kvtop.model.memory.gpu_memory"})
    assert violations("kvtop.model.sizing.replay", {"kvtop.model.snapshot"})
    assert violations("kvtop.model.status.judge", {"kvtop.model.build_snapshot"})
    assert not violations("kvtop.model.status.judge", {"kvtop.model.snapshot"})
    assert not violations("kvtop.model.sizing.formula", {"kvtop.model.safe_margin"})
    # Sources judge nothing.
    assert violations("kvtop.sources.nvml", {"kvtop.model.status.notes"})
    assert violations("kvtop.sources.nvml", {"kvtop.model.status.levels"})
    assert violations("kvtop.sources.metrics", {"kvtop.model.kv_usage"})
    assert not violations("kvtop.sources.nvml", {"kvtop.model.notes"})
    assert not violations("kvtop.sources.gpu_processes", {"kvtop.model.processes.record"})
    nested = imports_of(TUI / "live" / "app.py")
    assert "kvtop.live.screens.gpu_detail" in nested  # imported inside a method
    assert "kvtop.live.quiet_driver" in imports_of(TUI / "live" / "base.py")  # inside a method too


def test_the_demo_still_is_not_in_the_package() -> None:
    """Stills are for tests, benchmarks and screenshots (tests/support/still.py); kvtop never runs
    one."""
    assert not (TUI / "demo" / "still.py").exists()
    assert not any("still" in name for p in MODULES for name in imports_of(p))


def import_graph() -> dict[str, set[str]]:
    """Every kvtop module and the kvtop modules it imports (also inside functions and
    `if TYPE_CHECKING:`: a circle held apart by either is still a circle)."""
    graph = {_module_name(path): imports_of(path) for path in MODULES}
    return {
        module: {name for name in imported if name in graph and name not in ("kvtop", module)}
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
            "kvtop.sglang.startup": {"kvtop.sglang.failures", "kvtop.sglang.lifecycle"},
            "kvtop.sglang.failures": {"kvtop.sglang.startup"},
            "kvtop.sglang.lifecycle": {"kvtop.sglang.startup"},
        }
    ) == [["kvtop.sglang.failures", "kvtop.sglang.lifecycle", "kvtop.sglang.startup"]]


# The model is pure: files and the environment are read by sources and handed in (the model's
# config.json by tui/kvtop/sources/model_config_file.py, off the event loop).
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
