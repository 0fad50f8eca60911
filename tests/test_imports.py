"""No import cycle between the project's modules: every import, also the ones inside functions, is an edge."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("goose", "app")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imports_of(source: str, modules: set[str]) -> set[str]:
    """The project modules `source` imports; `from a import b` counts as a.b when that is a module, else a.
    The project imports absolutely only (relative imports are not resolved)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, "relative import: the project imports absolutely"
            base = node.module
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names)
    return {module for module in found if module in modules}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(path.read_text(encoding="utf-8"), set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None (depth-first search, three colours)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*stack[stack.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import():
    modules = {"goose.bench", "goose.bench_report", "goose.trace"}
    graph = {"goose.bench": imports_of("def f():\n    from goose.bench_report import g\n", modules),
             "goose.bench_report": imports_of("from goose.bench import BenchRun\nfrom goose import trace\n", modules)}
    assert graph["goose.bench_report"] == {"goose.bench", "goose.trace"}
    assert find_cycle(graph) == ["goose.bench", "goose.bench_report", "goose.bench"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_the_project():
    graph = import_graph()
    assert {"goose.metrics", "goose.charts", "goose.bench.runner", "app.callbacks"} <= set(graph)
    assert "goose.metrics" in graph["goose.charts"] and "goose.bench.summary" in graph["goose.bench.runner"]


def test_no_module_imports_itself_back():
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def transitive_imports(graph: dict[str, set[str]], module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_a_trace_loads_without_the_model_the_head_the_costs_or_the_loop():
    reached = transitive_imports(import_graph(), "goose.trace")
    heads = {module for module in reached if module.startswith("goose.heads")}
    assert not reached & {"goose.model", "goose.costs", "goose.decode"} and not heads, sorted(reached)


def room(module: str) -> str:
    """The part of the house a module belongs to: a folder of its own (the app, the bench, the sources) is one."""
    for folder in ("app", "goose.bench", "goose.heads", "goose.sources", "goose.whatif"):
        if module == folder or module.startswith(folder + "."):
            return folder
    return module


def test_the_stack_has_at_most_twelve_floors():
    """Floors as the house is drawn: a room stands above all it imports (folders of their own are one room; the
    package's face, goose/__init__.py, only hands names on and is left out)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        if module != "goose":
            rooms.setdefault(room(module), set()).update(room(t) for t in targets if t != "goose")
    floors: dict[str, int] = {}

    def floor(name: str) -> int:
        if name not in floors:
            floors[name] = 1 + max((floor(t) for t in rooms.get(name, ()) if t != name), default=0)
        return floors[name]

    assert max(floor(name) for name in rooms) <= 12, sorted(floors.items(), key=lambda item: -item[1])
