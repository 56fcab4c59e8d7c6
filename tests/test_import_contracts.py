"""Each import-linter contract can fail: in a scratch copy of the checkout, one deliberate bad
import per contract, and `lint-imports` must report every one of them broken."""

import shutil
import subprocess
import sys
from pathlib import Path

from django.conf import settings

BAD_IMPORTS = {
    # module that gains the import -> (the import, the contract it breaks)
    "drones/services.py": ("import deliveries.models", "Bounded contexts never import each other"),
    "outbox/relaying/relay.py": ("import packages.models", "The outbox kernel knows no context"),
    "notifications/services.py": (
        "import delivery_project.settings",
        "Contexts and the kernel never import the deployable that wires them",
    ),
    "outbox/core/subscriptions.py": ("import outbox.handling.dispatch", "The kernel is layered"),
    "delivery_project/urls.py": ("import harness.chaos", "Nothing that ships imports the workshop"),
    "drones/fleet_check.py": ("import drones.scheduling", "fleet check is below the scheduler"),
    "packages/services.py": ("import outbox.relaying.relay", "use the kernel through outbox.api, outbox.ops"),
    "delivery_project/health.py": ("import outbox.core.brokers", "use the kernel through outbox.api, outbox.ops"),
}
CONTRACTS = len({contract for _, contract in BAD_IMPORTS.values()})


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_contract_is_kept_and_each_breaks_on_a_bad_import(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(
        settings.BASE_DIR,
        copy,
        ignore=shutil.ignore_patterns(".venv", ".git", "var", "docs", "tests", "__pycache__", ".*_cache", "*.egg-info"),
    )
    kept = lint_imports(copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert f"Contracts: {CONTRACTS} kept, 0 broken." in kept.stdout

    for module, (statement, _) in BAD_IMPORTS.items():
        with (copy / module).open("a") as source:
            source.write(f"\n{statement}  # a deliberate bad import\n")
    broken = lint_imports(copy)

    assert broken.returncode != 0
    report = " ".join(broken.stdout.split())  # contract names may be wrapped over lines
    for _, contract in BAD_IMPORTS.values():
        assert contract in report
    assert f"Contracts: 0 kept, {CONTRACTS} broken." in report
