"""The kernel's own guide (kernel/mkdocs.yml, kernel/docs/), for a project that installs the kernel:
built strictly, so a broken link, anchor or snippet, or a page left out of the nav, fails; its
tables held to the code (every OUTBOX_* setting with the kernel's default, every name of
outbox.api, every command and option); and, like the kernel itself, naming nothing of this
project's domain."""

import ast
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import load_command_class
from outbox_tests.domain_words import DOMAIN

import outbox.api
import outbox.ops
from outbox.core.conf import DEFAULTS

pytestmark = pytest.mark.servers_unused  # reads no server variable: CI runs it once, in the embedded step

ROOT = Path(settings.BASE_DIR)
KERNEL = ROOT / "kernel"
GUIDE = KERNEL / "docs"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The guide built strictly once for this module: mkdocs' run, and the site's directory."""
    site = tmp_path_factory.mktemp("guide") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(KERNEL / "mkdocs.yml")]
        + ["--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about its successor
    )
    return done, site


def test_the_guide_builds_strictly_without_a_warning(built):
    done, site = built
    output = done.stdout + done.stderr
    problems = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR")) or "Error" in line]
    assert done.returncode == 0 and problems == [], output[-4000:]
    assert (site / "settings" / "index.html").exists()


# A line that means to include a file, however a formatter may have spaced it out.
INCLUSION = re.compile(r"^\s*-+\s*8\s*<\s*-+\s*\"(?P<path>[^\"]+)\"\s*$")


def test_every_inclusion_is_written_as_pymdown_snippets_reads_it():
    """`--8 < --"quickstart/settings_tail.py"` (as a formatter left it) is text, not an inclusion."""
    written = [
        f"{page.name}:{number}: {line}"
        for page in GUIDE.glob("*.md")
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        if INCLUSION.match(line) and not re.fullmatch(r'--8<-- "[^"]+"', line)
    ]
    assert written == []


def test_the_quickstart_page_shows_every_line_of_each_file_it_includes(built):
    _, site = built
    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "quickstart" / "index.html").read_text()))
    included = [
        found["path"] for line in (GUIDE / "quickstart.md").read_text().splitlines() if (found := INCLUSION.match(line))
    ]
    assert len(included) >= 8  # settings, the event, the order and its service, billing's model, handler and tests
    missing = [
        f"{path}: {line.strip()}"
        for path in included
        for line in next(p for p in (GUIDE / path, KERNEL / path) if p.exists()).read_text().splitlines()
        if line.strip() and line.strip() not in page
    ]
    assert missing == []


def test_the_reference_has_each_public_name_read_from_its_docstring(built):
    import outbox.testing

    testing = [
        n for n, v in vars(outbox.testing).items() if n[0] != "_" and getattr(v, "__module__", "") == "outbox.testing"
    ]
    _, site = built
    page = (site / "reference" / "index.html").read_text()
    public = {"outbox.api": outbox.api.__all__, "outbox.ops": outbox.ops.__all__, "outbox.testing": testing}
    missing = [
        f"{module}.{name}" for module, names in public.items() for name in names if f'id="{module}.{name}"' not in page
    ]
    assert missing == []
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "it is relayed once the surrounding transaction commits" in text  # publish()'s docstring, rendered


def documented_settings() -> dict[str, object]:
    """settings.md's tables: each `OUTBOX_*` row's name and its default, read as Python."""
    rows: dict[str, object] = {}
    for number, line in enumerate((GUIDE / "settings.md").read_text().splitlines(), start=1):
        if found := re.match(r"\| `(OUTBOX_[A-Z_]+)` \| `([^`]*)` \|", line):
            name, default = found.groups()
            assert name not in rows, f"settings.md:{number}: {name} is listed twice"
            rows[name] = ast.literal_eval(default)
    return rows


def settings_the_kernel_reads() -> tuple[set[str], dict[str, object]]:
    """Every `settings.OUTBOX_*` the kernel's code reads, and those it reads with a fallback of its
    own (`getattr(settings, "OUTBOX_...", fallback)`) with that fallback."""
    read, with_fallback = set(), {}
    for path in (ROOT / "outbox").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("OUTBOX_"):
                read.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("OUTBOX_")
            ):
                with_fallback[node.args[1].value] = ast.literal_eval(node.args[2])
    return read, with_fallback


def test_the_settings_table_lists_every_outbox_setting_with_the_kernels_default():
    documented = documented_settings()
    read, with_fallback = settings_the_kernel_reads()
    kernels = {**DEFAULTS, **with_fallback}

    assert sorted(set(kernels) - set(documented)) == [], "settings the guide does not list"
    assert sorted(set(documented) - set(kernels)) == [], "settings the guide lists that the kernel has not"
    assert sorted(read - set(kernels)) == [], "settings the kernel reads with no default"
    wrong = {
        name: f"the guide says {documented[name]!r}, the kernel {value!r}"
        for name, value in kernels.items()
        if (documented[name], type(documented[name])) != (value, type(value))
    }
    assert wrong == {}


def test_the_api_page_names_every_name_of_outbox_api():
    page = (GUIDE / "api.md").read_text()
    listed = set(re.findall(r"^\| `([A-Za-z_]+)[(`]", page, flags=re.MULTILINE))

    assert sorted(set(outbox.api.__all__) - listed) == []
    assert sorted(listed - set(outbox.api.__all__)) == []


def test_the_operations_page_names_every_name_of_outbox_ops():
    page = (GUIDE / "ops.md").read_text()
    listed = set(re.findall(r"^\| `([A-Za-z_]+)[(`]", page, flags=re.MULTILINE))

    assert sorted(set(outbox.ops.__all__) ^ listed) == []


# What every management command has from Django itself: not the kernel's to document.
DJANGOS_OWN = {"-h", "--help", "--version", "-v", "--verbosity", "--settings", "--pythonpath", "--traceback"}
DJANGOS_OWN |= {"--no-color", "--force-color", "--skip-checks"}


def options_of(command: str) -> list[str]:
    """The options the kernel's command adds to Django's own, as its parser knows them."""
    parser = load_command_class("outbox", command).create_parser("manage.py", command)
    return [option for action in parser._actions for option in action.option_strings if option not in DJANGOS_OWN]


def test_the_commands_page_has_every_command_of_the_kernel_with_every_option():
    page = (GUIDE / "commands.md").read_text()
    sections = dict(re.findall(r"^## `([a-z_]+)`.*?\n(.*?)(?=^## |\Z)", page, flags=re.MULTILINE | re.DOTALL))
    commands = sorted(p.stem for p in (ROOT / "outbox/management/commands").glob("*.py") if p.stem != "__init__")

    assert sorted(set(sections) - {"rundramatiq"}) == commands
    missing = {
        name: [option for option in options_of(name) if not re.search(rf"`{re.escape(option)}[ `]", sections[name])]
        for name in commands
    }
    assert {name: options for name, options in missing.items() if options} == {}


def test_the_guide_names_nothing_of_this_projects_domain():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in [KERNEL / "mkdocs.yml", *sorted(GUIDE.rglob("*"))]
        if path.is_file() and path.suffix in (".md", ".yml", ".py", ".html", ".css", ".js", ".txt", ".toml")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if DOMAIN.search(line)
    ]
    assert found == []
