"""Write tui/kvtop/model/sizing/sglang_launch_flags.py: every option string of SGLang's launch_server
parser, and whether it takes a value, read from an unpacked SGLang wheel without importing it.

    python scripts/sglang_flags.py SGLANG_PACKAGE_DIR [OUTPUT]

SGLANG_PACKAGE_DIR is the wheel's `sglang/` directory (e.g. /tmp/sglang-0.5.23/sglang). kvtop plan
refuses what SGLang's argparse refuses (an unknown flag, an ambiguous prefix) and must know which
flags take a value so that a switch never swallows the next word; importing sglang would need
torch and a GPU stack, so the option strings are read from the source with `ast`:

* the fields of the namespaces `server_args.py` lists in `_INPUT_NAMESPACES` (declared in
  `arg_groups/fields/*.py` as `name: A[T, "help"]` or `A[T, Arg(...)]`), turned into flags as
  `arg_groups/arg_utils.py::add_cli_args_from_dataclass` does (`--name-with-dashes`, `cli_name`,
  `aliases`, `no_cli`; bool → store_true, list → nargs "+", BooleanOptionalAction → --no-x too);
* the `parser.add_argument(...)` calls of `ServerArgs.add_cli_args` (dynamic choices, deprecated
  spellings, --config).

The output is a Python module (the sizing model reads no file): FLAGS maps each `--flag` to its
kind, one of `switch` (no value), `value` (exactly
one), `values` (nargs "+" or "*": the words up to the next flag), `optional` (nargs "?").
Standard library only.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

DEFAULT_OUTPUT = (
    Path(__file__).resolve().parents[1] / "tui/kvtop/model/sizing/sglang_launch_flags.py"
)
_SWITCH_ACTIONS = {
    "store_true",
    "store_false",
    "store_const",
    "count",
    "help",
    "version",
    "DeprecatedStoreTrueAction",
}


class ExtractError(RuntimeError):
    pass


def _name(node: ast.AST | None) -> str | None:
    """`A`, `typing.Optional`, `argparse.BooleanOptionalAction` → the last name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _literal(node: ast.AST | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _Unknown(ast.unparse(node))


class _Unknown:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<{self.text}>"


def _kwargs(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


def _unwrap_optional(node: ast.expr) -> ast.expr:
    """Optional[X], Union[X, None], X | None → X (as arg_utils._unwrap_optional)."""
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        return node.slice
    if isinstance(node, ast.Subscript) and _name(node.value) == "Union":
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        return rest[0] if len(rest) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [node.left, node.right]
        rest = [p for p in sides if not (isinstance(p, ast.Constant) and p.value is None)]
        return rest[0] if len(rest) == 1 else node
    return node


def _nargs_kind(nargs: object) -> str | None:
    if nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1):
        return "values"
    if nargs == "?":
        return "optional"
    if nargs == 0:
        return "switch"
    if nargs in (None, 1):
        return None
    raise ExtractError(f"nargs {nargs!r} is not understood")


def _action_kind(action: str | None, nargs: object) -> str:
    if action is None:
        return _nargs_kind(nargs) or "value"
    if action in _SWITCH_ACTIONS:
        return "switch"
    # A custom action: its nargs says (DeprecatedStoreConstAction with nargs=None takes one).
    return _nargs_kind(nargs) or "value"


def _field_flags(name: str, annotation: ast.expr) -> list[tuple[str, str]]:
    """One `A[T, ...]` field as add_cli_args_from_dataclass registers it ([] when it has none)."""
    if not (
        isinstance(annotation, ast.Subscript) and _name(annotation.value) in ("A", "Annotated")
    ):
        return []
    parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
    if len(parts) < 2:
        return []
    raw_type, metas = parts[0], parts[1:]
    arg: dict[str, ast.expr] | None = None
    for meta in metas:
        if isinstance(meta, ast.Call) and _name(meta.func) == "Arg":
            arg = _kwargs(meta)
            break
        if isinstance(meta, ast.Constant | ast.JoinedStr | ast.BinOp):
            arg = {}  # a bare help string
            break
        if isinstance(meta, ast.Call) and _name(meta.func) in ("NS", "Derived"):
            continue
        raise ExtractError(f"field {name}: annotation part {ast.unparse(meta)} is not understood")
    if arg is None:
        return []
    if _literal(arg.get("no_cli")) is True:
        return []
    cli_name = _literal(arg.get("cli_name")) or "--" + name.replace("_", "-")
    aliases = _literal(arg.get("aliases")) or []
    if not isinstance(cli_name, str) or not isinstance(aliases, list):
        raise ExtractError(f"field {name}: cli_name/aliases are not literals")
    names = [cli_name, *aliases]
    action_node = arg.get("action")
    action_kwargs = _literal(arg.get("action_kwargs")) or {}
    nargs = _literal(arg.get("nargs"))
    if action_node is not None:
        action = _name(action_node)
        if action == "BooleanOptionalAction":
            flags = [(n, "switch") for n in names]
            flags += [("--no-" + n[2:], "switch") for n in names if n.startswith("--")]
            return flags
        if isinstance(action_kwargs, dict) and "nargs" in action_kwargs:
            nargs = action_kwargs["nargs"]
        return [(n, _action_kind(action, nargs)) for n in names]
    inner = _unwrap_optional(raw_type)
    if _name(inner) == "bool":
        return [(n, "switch") for n in names]
    is_list = isinstance(inner, ast.Subscript) and _name(inner.value) in ("List", "list")
    if isinstance(inner, ast.Subscript) and _name(inner.value) == "Literal":
        return [(n, "value") for n in names]
    if is_list and arg.get("type_parser") is None:
        return [(n, _nargs_kind(nargs or "+") or "value") for n in names]
    return [(n, _nargs_kind(nargs) or "value") for n in names]


def _input_namespaces(server_args: ast.Module) -> list[str]:
    for node in server_args.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets)
            and isinstance(node.value, ast.List)
        ):
            return [n.id for n in node.value.elts if isinstance(n, ast.Name)]
    raise ExtractError("server_args.py has no _INPUT_NAMESPACES list")


def _namespace_classes(fields_dir: Path) -> dict[str, ast.ClassDef]:
    classes: dict[str, ast.ClassDef] = {}
    for path in sorted(fields_dir.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
    return classes


def _annotated_fields(cls: ast.ClassDef) -> list[tuple[str, ast.expr]]:
    return [
        (node.target.id, node.annotation)
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]


def _add_argument_flags(func: ast.FunctionDef) -> list[tuple[str, str]]:
    flags: list[tuple[str, str]] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and _name(node.func) == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if not names or len(names) != len(node.args):
            raise ExtractError(f"add_argument({ast.unparse(node)[:60]}...) is not literal")
        kw = _kwargs(node)
        action = _name(kw.get("action"))
        nargs = _literal(kw.get("nargs"))
        if action == "BooleanOptionalAction":
            flags += [(n, "switch") for n in names]
            flags += [("--no-" + n[2:], "switch") for n in names if n.startswith("--")]
            continue
        flags += [(str(n), _action_kind(action, nargs)) for n in names]
    return flags


def extract(package: Path) -> tuple[str, list[tuple[str, str]]]:
    """(SGLang's version, [(flag, kind)]) from the unpacked package directory."""
    srt = package / "srt"
    server_args = ast.parse((srt / "server_args.py").read_text(encoding="utf-8"))
    classes = _namespace_classes(srt / "arg_groups" / "fields")
    flags: list[tuple[str, str]] = []
    for namespace in _input_namespaces(server_args):
        if namespace not in classes:
            raise ExtractError(f"namespace {namespace} is not declared in arg_groups/fields/")
        for name, annotation in _annotated_fields(classes[namespace]):
            flags += _field_flags(name, annotation)
    server_cls = next(
        n for n in server_args.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"
    )
    for name, annotation in _annotated_fields(server_cls):
        flags += _field_flags(name, annotation)
    add_cli = next(
        n for n in server_cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"
    )
    flags += _add_argument_flags(add_cli)
    # argparse's own -h/--help comes first; the rest in the parser's order, which is the order
    # argparse names the candidates of an ambiguous prefix in.
    flags = [("-h", "switch"), ("--help", "switch"), *flags]
    seen: dict[str, str] = {}
    for flag, kind in flags:
        if flag in seen and seen[flag] != kind:
            raise ExtractError(f"{flag} is registered twice ({seen[flag]}, {kind})")
        seen[flag] = kind
    return _version(package), list(seen.items())


def _version(package: Path) -> str:
    for name in ("version.py", "__init__.py"):
        path = package / name
        if path.is_file():
            found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", path.read_text("utf-8"))
            if found:
                return found.group(1)
    for info in sorted(package.parent.glob("sglang-*.dist-info/METADATA")):
        found = re.search(r"^Version: (\S+)$", info.read_text("utf-8"), re.MULTILINE)
        if found:
            return found.group(1)
    # A wheel unpacked into a directory named after it (sglang-0.5.23/sglang/).
    found = re.fullmatch(r"sglang-(\d[\w.+-]*)", package.resolve().parent.name)
    if found:
        return found.group(1)
    raise ExtractError(f"no __version__ in {package}, no dist-info beside it")


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    package = Path(argv[0])
    output = Path(argv[1]) if len(argv) == 2 else DEFAULT_OUTPUT
    try:
        version, flags = extract(package)
    except (ExtractError, OSError, SyntaxError, StopIteration) as exc:
        print(f"sglang_flags: {package}: {exc}", file=sys.stderr)
        return 1
    lines = [
        f'"""SGLang {version}\'s launch_server flags: every option string of its argparse parser and',
        "what it takes (switch, value, values, optional). Generated by scripts/sglang_flags.py from",
        f'the sglang-{version} wheel\'s sglang/srt/server_args.py and arg_groups/fields/*.py."""',
        "",
        f"VERSION = {version!r}",
        "FLAGS: dict[str, str] = {",
        *(f"    {flag!r}: {kind!r}," for flag, kind in flags),
        "}",
    ]
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{output}: {len(flags)} flags of SGLang {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
