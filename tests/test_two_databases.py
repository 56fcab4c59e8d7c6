"""The kernel in the test's process with `drones` on a database of its own: every module of
tests/two_databases/ (the admin's pages of its tables, its pytest fixture's relays, ...), in a
pytest run of their own whose settings put the drones on a second database of this run's server
(a run reads its settings once, so this one cannot). The same with web, relays and workers as
processes, drones on a server of their own, is tests/e2e/test_context_database.py's."""

import os
import subprocess
import sys

import pytest
from django.conf import settings

from delivery_project import database_url
from tests.processes import THIS_RUN

# Every module there: named so that the suite's own collection (test_*.py) leaves them to this run.
MODULES = sorted(
    str(path.relative_to(settings.BASE_DIR))
    for path in (settings.BASE_DIR / "tests" / "two_databases").glob("*.py")
    if path.name != "__init__.py"
)


@pytest.mark.integration
@pytest.mark.postgres
def test_the_admins_pages_and_the_pytest_fixtures_relays_work_in_each_database():
    drones = database_url.url_of(database_url.parse(settings.DATABASE_URL), NAME="drones")
    environment = {name: value for name, value in os.environ.items() if name not in THIS_RUN}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0", "-q"] + MODULES,
        cwd=settings.BASE_DIR,
        env={**environment, "CONTEXT_DATABASE_URLS": f"drones={drones}"},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert " passed" in ran.stdout and "skipped" not in ran.stdout and "failed" not in ran.stdout, ran.stdout[-3000:]
