"""The kernel's parts as one picture drawn from its code: its folders, their modules, who imports whom.

docs/architecture.md shows it (a Mermaid block between MARKERS); tests/outbox/test_kernel_parts.py
fails when the code no longer matches it, as the choreography map's test does for the events.
The imports are read from the source with `ast` (every `import`, at the top or inside a
function), so the drawing shows what the import contract judges without importing the kernel.

Redraw it with `.venv/bin/python -m harness.kernel_parts` (a workshop tool: it reads a checkout).
"""

import ast
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "outbox"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MARKERS = ("<!-- python -m harness.kernel_parts -->", "<!-- /harness.kernel_parts -->")
LEFT_OUT = {"migrations"}  # Django's history of the tables, not a part


@dataclass(frozen=True)
class Parts:
    layers: tuple[tuple[str, ...], ...]  # top first, as the import contract orders them
    modules: dict[str, tuple[str, ...]]  # a part: its modules (a root module is a part of its own)
    purposes: dict[str, str]  # a folder: the first line of its docstring
    imports: frozenset[tuple[str, str]]  # (importer, imported), between parts


def read(kernel: Path = KERNEL, pyproject: Path = ROOT / "pyproject.toml") -> Parts:
    modules: dict[str, list[str]] = {}
    purposes: dict[str, str] = {}
    imports: set[tuple[str, str]] = set()
    for path in sorted(kernel.rglob("*.py")):
        inside = path.relative_to(kernel).with_suffix("").parts
        if inside[0] in LEFT_OUT or inside == ("__init__",):
            continue
        part = inside[0]
        if inside[-1] == "__init__":
            if len(inside) == 2:  # a folder of the kernel: what it is for
                purposes[part] = (ast.get_docstring(ast.parse(path.read_text())) or "?").splitlines()[0]
            continue
        modules.setdefault(part, []).append(".".join(inside[1:]) or part)
        for imported in _imports_of(path, kernel):
            if imported != part:
                imports.add((part, imported))
    return Parts(
        layers=_layers(pyproject),
        modules={part: tuple(names) for part, names in modules.items()},
        purposes=purposes,
        imports=frozenset(imports),
    )


def _imports_of(path: Path, kernel: Path) -> set[str]:
    """The kernel's parts that a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            dotted = name.split(".")
            if dotted[0] == kernel.name and len(dotted) > 1 and dotted[1] not in LEFT_OUT:
                found.add(dotted[1])
    return found


def _layers(pyproject: Path) -> tuple[tuple[str, ...], ...]:
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["type"] == "layers" and c.get("containers") == ["outbox"]]
    return tuple(tuple(name.strip() for name in layer.split("|")) for layer in layered["layers"])


def to_mermaid(parts: Parts) -> str:
    """Top to bottom in the contract's layers: a folder a box of its modules, an arrow an import."""
    lines = ["flowchart TD"]
    for layer in parts.layers:
        for part in layer:
            if part in parts.purposes:
                lines.append(f'  subgraph {part}["{part}/: {parts.purposes[part]}"]')
                lines.extend(f'    {part}_{module.replace(".", "_")}["{module}"]' for module in parts.modules[part])
                lines.append("  end")
            else:
                lines.append(f'  {part}["{part}"]')
    for importer, imported in sorted(parts.imports):
        lines.append(f"  {importer} --> {imported}")
    return "\n".join(lines) + "\n"


def placed(parts: Parts) -> set[str]:
    return {part for layer in parts.layers for part in layer}


def redrawn(markdown: str, parts: Parts) -> str:
    """`markdown` with the drawing between MARKERS replaced by the drawing of `parts`."""
    from outbox.console.choreography_map import replace_block  # the same block, as show_routes writes it

    return replace_block(markdown, to_mermaid(parts), MARKERS)


def main() -> None:
    parts = read()
    if missing := set(parts.modules) - placed(parts):
        sys.exit(f"not in the layers contract of pyproject.toml: {', '.join(sorted(missing))}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delivery_project.settings")
    import django

    django.setup()
    ARCHITECTURE.write_text(redrawn(ARCHITECTURE.read_text(), parts))
    print(f"{ARCHITECTURE.relative_to(ROOT)}: the kernel's parts redrawn ({len(parts.modules)} parts)")


if __name__ == "__main__":
    main()
