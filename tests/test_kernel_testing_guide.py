"""kernel/docs/testing.md, the kernel's testing guide, cannot rot: each of its code blocks is, word
for word, part of a file of the fresh project (kernel/quickstart), whose tests
tests/test_kernel_in_a_fresh_project.py runs with the kernel's wheel; it names every fixture the
kernel's pytest plugin gives; and, written for any project, it names nothing of this one's domain."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from outbox_tests.domain_words import DOMAIN

pytestmark = pytest.mark.servers_unused  # CI runs it once, in the embedded step

ROOT = Path(settings.BASE_DIR)
GUIDE = ROOT / "kernel" / "docs" / "testing.md"
FRESH_PROJECT = ROOT / "kernel" / "quickstart"
PLUGIN = ROOT / "kernel" / "outbox_pytest" / "__init__.py"


def code_blocks() -> list[str]:
    return re.findall(r"^```\w*\n(.*?)^```", GUIDE.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_every_code_block_of_the_guide_is_in_a_file_of_the_fresh_project_word_for_word():
    # Every file there but its README is part of the project the fresh-project test builds and runs.
    files = {
        path: path.read_text()
        for path in FRESH_PROJECT.rglob("*")
        if path.is_file() and path.suffix != ".md" and "__pycache__" not in path.parts
    }
    shown = code_blocks()

    assert len(shown) >= 10, "the guide's code blocks were not found"
    nowhere = [code for code in shown if not any(code.rstrip("\n") in text for text in files.values())]
    assert nowhere == [], "in kernel/docs/testing.md, but in no file of kernel/quickstart"


def test_the_guide_names_every_fixture_of_the_plugin_and_nothing_of_this_projects_domain():
    guide = GUIDE.read_text()
    fixtures = re.findall(r"^def (outbox_\w+)\(", PLUGIN.read_text(), flags=re.MULTILINE)

    assert len(fixtures) >= 6
    assert [name for name in fixtures if f"`{name}`" not in guide] == []
    assert [line for line in guide.splitlines() if DOMAIN.search(line)] == []
