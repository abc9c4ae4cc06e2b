"""The package's import graph: no cycles, each heavy library behind the modules that own it, and the
layers of docs/ARCHITECTURE.md: adapters on top, the service under them, storage at the bottom.

Parsed from the source (every import statement, also those inside functions, since
a deferred import is still a dependency), so the rules hold without importing anything.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "appliance"

OWNERS = {
    "lancedb": {"storage.tables", "storage.index", "storage.writes", "storage.sources", "storage.reads",
                "storage.swap"},
    "pyarrow": {"storage.tables", "storage.index", "storage.writes", "storage.sources", "storage.reads",
                "storage.swap", "storage.replica", "storage.addresses"},
    "fastembed": {"embed"},
    "onnxruntime": {"models.e5_onnx"},
    "markitdown": {"ingest.convert_markitdown"},
    "markdown_it": {"ingest.markdown_blocks"},
    "obstore": {"storage.bucket"},  # an index in a bucket: identity.json and the writer lease
    "pypdfium2": {"ingest.convert_pdf", "ingest.ocr"},
    "rapidocr": {"ingest.ocr"},
    "rapidocr_onnxruntime": {"ingest.ocr"},
    "pytesseract": {"ingest.ocr"},
    "ray": {"cluster.driver"},  # the optional [cluster] extra (sync --ray); node.py runs in Ray without importing it
    "fastmcp": {"adapters.mcp_server"},
    "mcp": {"adapters.mcp_server"},
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
                if node.module.split(".")[0] == "appliance":  # from appliance.p import x: x may be a module
                    found.update(f"{node.module}.{alias.name}" for alias in node.names)
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


def package(module: str) -> str:
    return module.split(".")[0]


FORBIDDEN = {
    "storage": {"sync", "search", "assemble", "adapters", "service", "core", "health", "cluster", "ingest"},
    "platform": {"sync", "search", "assemble", "storage", "service", "core", "health", "cluster", "ingest"},
    "ingest": {"storage", "sync", "search", "assemble", "adapters", "service", "core", "health", "cluster"},
    "search": {"sync", "adapters", "service", "health", "cluster"},
    "assemble": {"sync", "adapters", "service", "health", "cluster"},
    "sync": {"adapters", "service"},
    "service": {"adapters"},
    "core": {"adapters", "service"},
    "health": {"adapters", "service"},
    "results": {"adapters", "service", "sync", "search", "assemble", "storage", "ingest"},
}
"""Package (or top-level module) -> the packages it must not import: each layer looks only downwards, and the
service's records (results) carry their own wire shape, so nothing below the adapters needs an adapter."""


def test_each_layer_imports_only_what_lies_below_it() -> None:
    graph = internal_graph()
    crossed = sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                     if package(target) in FORBIDDEN.get(package(module), set()))
    assert crossed == []
    assert set(FORBIDDEN) <= {package(m) for m in graph}  # every layer named exists


def test_no_module_imports_a_private_name_of_another_package() -> None:
    """An adapter does not reach into another adapter (or any module into another package) by a private name."""
    reached = []
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("appliance."):
                source = node.module.removeprefix("appliance.")
                same_package = "." in module and package(source) == package(module)
                reached += [f"{module} imports {source}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not same_package and source != module]
    assert reached == []


SYNC_MACHINERY = {"sync.stamp", "sync.handoff", "sync.indexing", "sync.plan", "sync.pipeline", "sync.reuse",
                  "storage.locking", "cluster", "cluster.driver", "cluster.node"}
"""How a sync runs: decided by appliance.sync.runner for every caller, so no adapter chooses a way itself."""


def test_the_cli_imports_nothing_of_how_a_sync_runs() -> None:
    graph = internal_graph()
    assert graph["adapters.cli"] & SYNC_MACHINERY == set()
    assert "sync.runner" in graph["adapters.cli"]  # the sync command calls the runner and prints


def test_no_module_reaches_into_the_private_names_of_indexing() -> None:
    """The Ray driver and node write and cut through indexing's public steps, not its internals."""
    reached = []
    for path in PACKAGE.rglob("*.py"):
        if module_name(path) == "sync.indexing":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "indexing" \
                    and node.attr.startswith("_"):
                reached.append(f"{module_name(path)}: indexing.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "appliance.sync.indexing":
                reached += [f"{module_name(path)}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert reached == []


def test_every_package_is_named_in_the_architecture_page() -> None:
    page = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text("utf-8")
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert packages and [p for p in packages if f"`{p}/`" not in page] == []
