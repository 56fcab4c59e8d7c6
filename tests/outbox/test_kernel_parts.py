"""The drawing of the kernel's parts in docs/architecture.md is the code's, and every module has a place."""

from pathlib import Path

from harness import kernel_parts

REDRAW = "run `.venv/bin/python -m harness.kernel_parts` and commit docs/architecture.md"


def test_the_checked_in_drawing_matches_the_code():
    architecture = kernel_parts.ARCHITECTURE.read_text()
    assert kernel_parts.redrawn(architecture, kernel_parts.read()) == architecture, REDRAW


def test_every_module_of_the_kernel_is_drawn_in_a_part_the_import_contract_places():
    parts = kernel_parts.read()
    drawn = {f"{part}.{module}" if module != part else part for part, ms in parts.modules.items() for module in ms}
    on_disk = {
        ".".join(path.relative_to(kernel_parts.KERNEL).with_suffix("").parts)
        for path in kernel_parts.KERNEL.rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    }
    assert drawn == on_disk
    assert set(parts.modules) <= kernel_parts.placed(parts)
    assert {"core", "relaying", "handling", "console", "observability"} <= set(parts.purposes)


def test_a_new_import_between_parts_is_a_new_arrow(tmp_path: Path):
    kernel = tmp_path / "outbox"
    for folder, module, source in [
        ("core", "publishing", "from outbox.observability import tracing\n"),
        ("relaying", "relay", "import outbox.core.publishing\nfrom outbox.models import OutboxMessage\n"),
        ("observability", "tracing", "def later():\n    from outbox.relaying import relay\n"),
    ]:
        (kernel / folder).mkdir(parents=True)
        (kernel / folder / "__init__.py").write_text(f'"""The {folder}.\n\nMore."""\n')
        (kernel / folder / f"{module}.py").write_text(source)
    (kernel / "models.py").write_text("import os\n")

    parts = kernel_parts.read(kernel)

    assert parts.imports == {
        ("core", "observability"),
        ("relaying", "core"),
        ("relaying", "models"),
        ("observability", "relaying"),  # an import inside a function counts too
    }
    assert parts.purposes["core"] == "The core."
    drawing = kernel_parts.to_mermaid(parts)
    assert '  subgraph relaying["relaying/: The relaying."]\n    relaying_relay["relay"]\n  end' in drawing
    assert "  observability --> relaying" in drawing
