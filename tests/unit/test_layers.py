"""The package's import graph: no cycles, and each heavy library behind the one module that owns it.

Parsed from the source (every import statement, also those inside functions, since
a deferred import is still a dependency), so the rule holds without importing anything.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "appliance"

STORAGE = {"store", "store_index", "store_writes", "store_sources", "store_reads", "swap"}
"""The storage modules: the tables (store), their composition (store_index), writes and upkeep, the source
registry, the query reader, and the one-commit replacement (swap). Only they touch LanceDB."""

OWNERS = {
    "lancedb": STORAGE,
    "pyarrow": STORAGE | {"replica"},
    "fastembed": {"embed"},
    "onnxruntime": {"models.e5_onnx"},
    "markitdown": {"ingest.convert_markitdown"},
    "markdown_it": {"ingest.markdown_blocks"},
    "pypdfium2": {"ingest.convert_pdf", "ingest.ocr"},
    "rapidocr": {"ingest.ocr"},
    "rapidocr_onnxruntime": {"ingest.ocr"},
    "pytesseract": {"ingest.ocr"},
    "ray": {"cluster.driver"},  # the optional [cluster] extra (sync --ray); node.py runs in Ray without importing it
    "fastmcp": {"server"},
    "mcp": {"server"},
}
"""Third-party package -> the only modules (relative to appliance/) that may import it."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module -> every absolute module name it imports (appliance.* names without the prefix)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                if node.module == "appliance":  # from appliance import x, y: x and y may be modules
                    found.update(f"appliance.{alias.name}" for alias in node.names)
        graph[module_name(path)] = found
    return graph


def internal_graph() -> dict[str, set[str]]:
    graph = imports()
    out: dict[str, set[str]] = {}
    for module, names in graph.items():
        targets = set()
        for name in names:
            if name.startswith("appliance."):
                target = name.removeprefix("appliance.")
                while target and target not in graph:  # `from appliance.x import y` where y is a name
                    target = target.rpartition(".")[0]
                if target and target != module:
                    targets.add(target)
        out[module] = targets
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycles() -> None:
    # the package root (appliance/__init__) only sets process-wide switches; every module imports it implicitly
    graph = {m: {t for t in targets if t} for m, targets in internal_graph().items() if m}
    assert cycles(graph) == []


def test_each_heavy_library_is_imported_only_by_its_owner() -> None:
    crossed = []
    for module, names in imports().items():
        for name in names:
            top = name.split(".")[0]
            if top in OWNERS and module not in OWNERS[top]:
                crossed.append(f"{module} imports {name} (owned by {', '.join(sorted(OWNERS[top]))})")
    assert crossed == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


SERVICE = {"service", "core", "sync_plan", "sync_runner", "indexing", "searching", "reading", "health", "results"}
"""The service layer: it returns records (results.py: each its own wire shape); it imports no adapter."""
ADAPTERS = {"cli", "server", "runtime", "mcp_models", "status_page", "http_server", "host_guard", "stdio_front"}


def test_the_service_imports_no_adapter_and_no_wire_shape() -> None:
    graph = internal_graph()
    crossed = sorted(f"{module} imports {target}" for module in SERVICE for target in graph.get(module, set())
                     if target in ADAPTERS)
    assert crossed == []
    assert set(graph) >= SERVICE  # every service module exists under that name


SYNC_MACHINERY = {"sync_stamp", "handoff", "cluster", "cluster.driver", "cluster.node", "indexing", "sync_plan",
                  "pipeline", "reuse", "locking"}
"""How a sync runs: decided by appliance.sync_runner for every caller, so no adapter chooses a way itself."""


def test_the_cli_imports_nothing_of_how_a_sync_runs() -> None:
    graph = internal_graph()
    assert graph["cli"] & SYNC_MACHINERY == set()
    assert "sync_runner" in graph["cli"]  # the sync command calls the runner and prints


def test_no_module_reaches_into_the_private_names_of_indexing() -> None:
    """The Ray driver and node write and cut through indexing's public steps, not its internals."""
    reached = []
    for path in PACKAGE.rglob("*.py"):
        if module_name(path) == "indexing":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "indexing" \
                    and node.attr.startswith("_"):
                reached.append(f"{module_name(path)}: indexing.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "appliance.indexing":
                reached += [f"{module_name(path)}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert reached == []
