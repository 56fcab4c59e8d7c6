"""docs/adding-a-context.md cannot rot: each of its code blocks is a file of the guide's app
(tests/guide/receipts), that app takes nothing from the kernel but outbox.api, and its tests
pass with it installed (a pytest run of their own, on this run's database server and broker)."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.processes import THIS_RUN

ROOT = Path(settings.BASE_DIR)
GUIDE = ROOT / "docs" / "adding-a-context.md"
APP = ROOT / "tests" / "guide"


def blocks() -> dict[str, str]:
    found = re.findall(r'```python title="([^"]+)"\n(.*?)```', GUIDE.read_text(), flags=re.DOTALL)
    return dict(found)


def test_every_code_block_of_the_guide_is_a_file_of_its_app_word_for_word():
    shown = blocks()
    files = {str(path.relative_to(ROOT)) for path in APP.rglob("*.py") if "migrations" not in path.parts}

    assert set(shown) == files - {
        "tests/guide/__init__.py",
        "tests/guide/receipts/__init__.py",
        "tests/guide/settings.py",
    }
    for path, code in shown.items():
        assert (ROOT / path).read_text() == code, f"{path} differs from its block in {GUIDE.name}"


def test_the_guides_app_takes_nothing_from_the_kernel_but_its_surfaces():
    reached = set()
    for path in (APP / "receipts").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("outbox"):
                reached.add(node.module)
    testing = {
        n.module for n in ast.walk(ast.parse((APP / "test_receipts.py").read_text())) if isinstance(n, ast.ImportFrom)
    }

    assert reached == {"outbox.api"}
    assert {module for module in testing if module.startswith("outbox")} == {"outbox.testing"}


@pytest.mark.integration
def test_the_guides_app_passes_its_tests_installed():
    environment = {name: value for name, value in os.environ.items() if name not in THIS_RUN}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "--ds", "tests.guide.settings"]
        + [str(APP / "test_receipts.py")],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "2 passed" in ran.stdout
