"""The kernel is for any Django project: its code, templates and static files name none
of this project's contexts or their things; where it needs an example, it is an order's. Nor does
anything else its distribution ships: kernel/'s README, changelog, licence, build files
and whatever documents are added there. tests/test_kernel_distribution.py reads the built archives."""

import re
from pathlib import Path

from django.conf import settings

KERNEL = Path(settings.BASE_DIR) / "outbox"
DISTRIBUTION = Path(settings.BASE_DIR) / "kernel"
# This project's domain, as words; a broker's delivery tag, mode and limit are messaging's own, and
# setuptools' table of what a distribution ships (`tool.setuptools.packages`) is packaging's.
DOMAIN = re.compile(
    r"(?<!setuptools\.)\b(drones?|deliver(y|ies)|packages?|fleet)\b(?![ _-](tags?|mode|info|limit)\b)", re.IGNORECASE
)
TEXT = (".py", ".html", ".js", ".css", ".txt", ".md", ".json", ".toml", ".cfg", ".in", "")  # "": LICENSE


def shipped() -> list[Path]:
    """The kernel's code (kernel/outbox is a link to it) and kernel/'s own files, not what a build leaves there."""
    code = [path for path in KERNEL.rglob("*") if "__pycache__" not in path.parts]
    own = [
        path
        for path in DISTRIBUTION.rglob("*")
        if not (path.relative_to(DISTRIBUTION).parts[0] in ("outbox", "build", "dist") or ".egg-info" in str(path))
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
