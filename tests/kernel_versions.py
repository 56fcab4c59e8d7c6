"""The Python and Django versions the kernel declares, and the guide's quickstart project built
on any of them from the kernel's wheel: what tests/test_kernel_in_a_fresh_project.py and
tests/test_kernel_versions.py run.

Which combinations: the kernel's classifiers (kernel/pyproject.toml) name its Pythons and its
Djangos, the same list kernel/README.md promises; Django 6 itself needs Python 3.12 or later. Each
combination gets a virtual environment of its own, made by uv (its cache makes the second and later
ones a matter of seconds) with the interpreter pyenv installed for that Python.
"""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
APPS = ROOT / "kernel" / "quickstart"  # the guide's quickstart, as files
CLASSIFIERS = tomllib.loads((ROOT / "kernel" / "pyproject.toml").read_text())["project"]["classifiers"]


def _declared(pattern: str) -> list[str]:
    found = [m.group(1) for c in CLASSIFIERS if (m := re.fullmatch(pattern, c))]
    return sorted(found, key=lambda v: tuple(map(int, v.split("."))))


PYTHONS = _declared(r"Programming Language :: Python :: (3\.\d+)")
DJANGOS = _declared(r"Framework :: Django :: (\d+\.\d+)")
COMBINATIONS = [
    (python, django)
    for python in PYTHONS
    for django in DJANGOS
    if not (django.startswith("6.") and tuple(map(int, python.split("."))) < (3, 12))
]
THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
THIS_PYTHON_AND_DJANGO_LTS = (THIS_PYTHON, "5.2")  # as this project runs, the whole suite
NEWEST = COMBINATIONS[-1]


def combination_id(combination: tuple[str, str]) -> str:
    return f"py{combination[0]}-django{combination[1]}"


def interpreter(python: str) -> Path:
    """The interpreter of `python` (3.12): this run's, or pyenv's. Without it the test skips,
    saying which, and under CI=true a skip fails the run: CI's machine has each."""
    if python == THIS_PYTHON:
        return Path(sys.executable)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(pyenv.glob(f"versions/{python}.*/bin/python{python}"))
    if found:
        return found[-1]
    if which := shutil.which(f"python{python}"):
        return Path(which)
    pytest.skip(f"needs Python {python} (pyenv install {python}), which this machine does not have")


# Beside the guide's settings, the test's own: a poison order is a dead letter after one quick retry;
# and, for the flow through RabbitMQ, the throwaway PostgreSQL database the test made.
TESTS_OWN_SETTINGS = """
OUTBOX_MAX_RETRIES = 1
OUTBOX_MIN_BACKOFF_MS, OUTBOX_MAX_BACKOFF_MS = 50, 100
if os.environ.get("SHOP_POSTGRESQL"):
    DATABASES["default"] = {"ENGINE": "django.db.backends.postgresql", "NAME": os.environ["SHOP_POSTGRESQL"],
                            "HOST": os.environ["SHOP_POSTGRESQL_HOST"], "PORT": os.environ["SHOP_POSTGRESQL_PORT"],
                            "USER": os.environ["SHOP_POSTGRESQL_USER"]}
if os.environ.get("SHOP_CONTEXT_ROLE_PREFIX"):  # each app in a schema with a role of its own (roles are the cluster's)
    OUTBOX_CONTEXTS = ["orders", "billing"]
    OUTBOX_CONTEXT_ROLE_PREFIX = os.environ["SHOP_CONTEXT_ROLE_PREFIX"]
if os.environ.get("SHOP_BILLING_POSTGRESQL"):  # billing on a database of its own
    DATABASES["billing"] = {**DATABASES["default"], "NAME": os.environ["SHOP_BILLING_POSTGRESQL"]}
    OUTBOX_CONTEXT_DATABASES = {"billing": "billing"}
    DATABASE_ROUTERS = ["outbox.placement.databases.ContextDatabases"]
"""

# What an install from an index needs of this environment: a proxy, its certificates, pip's settings.
NETWORK_ENV = {
    name: value
    for name, value in os.environ.items()
    if name in ("PATH", "HOME")
    or "PROXY" in name.upper()
    or name.startswith(("SSL_", "PIP_", "UV_"))
    or name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
}
UV = Path(sys.executable).with_name("uv")  # where `./dev` installs it: a sixth of pip's time


def run(command: list, *, env: dict | None = None, timeout: float = 300, cwd: Path | None = None) -> str:
    """`command` to its end, in `env` or a bare one (nothing of this project's settings leaks in)."""
    env = env or {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def virtual_environment(where: Path, python: str, requirements: list[str]) -> Path:
    """A virtual environment of `python`'s at `where`, with `requirements` in it."""
    if UV.exists():
        run([str(UV), "venv", "--quiet", "--python", str(interpreter(python)), str(where)], env=NETWORK_ENV)
        install = [str(UV), "pip", "install", "--quiet", "--python", str(where / "bin/python")]
    else:
        run([str(interpreter(python)), "-m", "venv", str(where)])
        install = [str(where / "bin/pip"), "install", "--quiet", "--disable-pip-version-check"]
    run(install + requirements, env=NETWORK_ENV, timeout=600)
    return where


def build_project(where: Path, wheel: Path, python: str, django: str, *, extras: str = "embedded") -> Path:
    """The guide's quickstart as its reader makes it: the kernel's wheel, Django `django` and, for the
    project's tests, pytest-django (as this run's) in a virtual environment of `python`'s; `django-admin
    startproject shop`; the two apps, the settings the guide adds, and the project's tests."""
    tests = [f"pytest=={version('pytest')}", f"pytest-django=={version('pytest-django')}"]
    kernel = f"django-outbox-choreography[{extras}] @ {wheel.as_uri()}"  # the quickstart's broker: the embedded one
    venv = virtual_environment(where / ".venv", python, [kernel, f"Django~={django}.0", *tests])
    shop = where / "shop"
    shop.mkdir()
    run([str(venv / "bin/django-admin"), "startproject", "shop", str(shop)])
    for app in ("orders", "billing"):
        shutil.copytree(APPS / app, shop / app, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(APPS / "pytest.ini", shop)  # its tests' settings, and tests.py as a name for them
    shutil.copy(APPS / "shop" / "tests.py", shop / "shop")  # the flows across its apps
    with (shop / "shop" / "settings.py").open("a") as settings_file:
        settings_file.write("\n" + (APPS / "settings_tail.py").read_text() + TESTS_OWN_SETTINGS)
    return shop
