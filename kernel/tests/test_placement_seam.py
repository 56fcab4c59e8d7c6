"""Where a context's data lives is decided in one place, `outbox.placement`, asked at the kernel's
entry points only; and the kernel's modules import one another without a circle. Imports are read
as Python runs them: a function's own import counts as much as the module's, and `outbox.api`'s
names, loaded on first use, count as imports of the modules they come from."""

import ast
from importlib import import_module
from pathlib import Path

import outbox

KERNEL = Path(outbox.__file__).parent
# The entry points: a dispatch and a pack, a relay round and a sweep page, migrate's hooks (apps), a
# command that moves a context, the story read as the operator. Beside them the two surfaces name
# placement's answers for their users: `atomic` and `connection_of` (outbox.api, the contexts'),
# `acting_as` (outbox.ops, the deployable's wiring).
ENTRY_POINTS = {
    "outbox.handling.dispatch",  # a message's and a pack's (`entered`)
    "outbox.relaying.relay",
    "outbox.relaying.sweep",
    "outbox.apps",
    "outbox.management.commands.move_context",
    "outbox.console.timeline",
    "outbox.admin",  # an operator's page: where each subscriber's handled messages are counted
}
SURFACES = {"outbox.api", "outbox.ops"}


def module_name(path: Path) -> str:
    parts = path.relative_to(KERNEL.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kernel_modules() -> dict[str, Path]:
    return {module_name(path): path for path in KERNEL.rglob("*.py") if "migrations" not in path.parts}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kernel's modules `name` imports, wherever in it (a function's own import included)."""
    found = set()

    def module_of(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {module_of(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {module_of(f"{node.module}.{alias.name}") for alias in node.names}
    if name in SURFACES:  # each name loaded on first use: an import all the same
        found |= {module_of(module) for module, _ in import_module(name).SURFACE.values()}
    return {module for module in found if module and module != name and module.startswith("outbox")}


def import_graph() -> dict[str, set[str]]:
    modules = kernel_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_the_kernels_modules_import_one_another_without_a_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found_however_deep_in_a_function_its_import_is(tmp_path):
    graph = {"outbox.a": {"outbox.b"}, "outbox.b": {"outbox.c"}, "outbox.c": {"outbox.a"}, "outbox.d": set()}
    assert circles(graph) == [["outbox.a", "outbox.b", "outbox.c"]]
    source = tmp_path / "b.py"
    source.write_text("def later():\n    from outbox.core.subscriptions import context_of\n")
    assert imports_of("outbox.b", source, kernel_modules()) == {"outbox.core.subscriptions"}


def test_only_the_entry_points_ask_placement_where_a_context_lives():
    graph = import_graph()
    asking = {
        module
        for module, imported in graph.items()
        if not module.startswith("outbox.placement") and any(m.startswith("outbox.placement") for m in imported)
    }
    assert asking == ENTRY_POINTS | SURFACES
    assert len(asking) <= 9


def test_no_kernel_module_finds_its_database_from_its_callers_frame():
    readers = [
        str(path.relative_to(KERNEL.parent))
        for path in KERNEL.rglob("*.py")
        if "_getframe" in path.read_text() or "inspect.stack" in path.read_text()
    ]
    assert readers == []
