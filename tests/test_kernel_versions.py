"""The kernel on every Python × Django it declares. This project's own Python
with Django 5.2 LTS runs the whole suite; it and the newest pair also run the guide's quickstart as
processes (tests/test_kernel_in_a_fresh_project.py). Each other pair builds the quickstart from the
kernel's wheel and runs what shows most for a few seconds: the kernel's migrations as that Django
reads them (no change it would make), `manage.py check`, and the project's own tests with the
kernel's pytest plugin (one subscriber alone, whole flows, a relay and a worker on a redis-server),
which go through publish, dispatch, the inbox, dead letters and the relay on that Django."""

import pytest

from tests.kernel_versions import COMBINATIONS, NEWEST, THIS_PYTHON_AND_DJANGO_LTS, build_project, combination_id, run
from tests.test_kernel_distribution import kernel_wheel
from tests.test_kernel_in_a_fresh_project import Deployment, redis_server

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.servers_unused]
OTHERS = [pair for pair in COMBINATIONS if pair not in (THIS_PYTHON_AND_DJANGO_LTS, NEWEST)]
# In one process (each manage.py would start Django again): the system checks, warnings included,
# and the kernel's migrations as that Django reads them (no change it would make); then which
# Django and which Python ran them.
CHECKED = (
    "import sys, django; django.setup(); from django.core.management import call_command; "
    "call_command('check', fail_level='WARNING'); "
    "call_command('makemigrations', 'outbox', check=True, dry_run=True, verbosity=0); "
    "print(django.get_version(), sys.version)"
)


def test_every_declared_django_is_run_with_every_python_it_supports():
    """What kernel/README.md and the classifiers promise is what CI runs: nine pairs, less the two
    Django 6 with Python 3.11 (Django 6 needs 3.12)."""
    assert [combination_id(pair) for pair in COMBINATIONS] == [
        "py3.11-django5.2",
        "py3.12-django5.2",
        "py3.12-django6.0",
        "py3.12-django6.1",
        "py3.13-django5.2",
        "py3.13-django6.0",
        "py3.13-django6.1",
    ]
    assert {THIS_PYTHON_AND_DJANGO_LTS, NEWEST} | set(OTHERS) == set(COMBINATIONS)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return kernel_wheel(tmp_path_factory)


@pytest.mark.parametrize("pair", OTHERS, ids=combination_id)
def test_the_quickstart_and_its_tests_on(pair, wheel, tmp_path):
    python, django = pair
    shop = build_project(tmp_path, wheel, python, django)
    with redis_server(tmp_path) as broker_url:
        deployment = Deployment(shop, broker_url)
        installed = run([deployment.python, "-c", CHECKED], env=deployment.env, cwd=shop).strip().splitlines()[-1]
        assert installed.startswith(django) and installed.split()[1].startswith(python), installed
        ran = deployment.pytest("-q", "-rA")
    assert "10 passed" in ran, ran
