"""The kernel's prose earns its place: a module says what it is for in a few lines, and points its
reader to the kernel's own guide, never to the docs of the project it was built in (which do not
ship with it)."""

import ast
import re
from pathlib import Path

import outbox

KERNEL = Path(outbox.__file__).parent
MODULES = sorted(path for path in KERNEL.rglob("*.py") if "migrations" not in path.parts)
# docs/events/ is where two of its commands write the catalogue, in whatever project runs them.
THIS_PROJECTS_DOCS = re.compile(r"\bdocs/(?!events\b)[\w/.-]+|\b[a-z-]+\.md\b")


def test_a_kernel_modules_docstring_is_twelve_lines_at_most():
    long = {}
    for path in MODULES:
        docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        if len(docstring.strip().splitlines()) > 12:
            long[str(path.relative_to(KERNEL.parent))] = len(docstring.strip().splitlines())
    assert long == {}


def test_the_kernels_code_points_to_no_document_of_this_project():
    pointers = [
        f"{path.relative_to(KERNEL.parent)}:{number}: {line.strip()}"
        for path in MODULES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if THIS_PROJECTS_DOCS.search(line) and "CHANGELOG.md" not in line and '".md"' not in line
    ]
    assert pointers == []
