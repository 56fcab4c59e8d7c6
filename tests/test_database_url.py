"""DATABASE_URL means what it means to libpq: every option reaches the connection, none is dropped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from delivery_project import database_url
from tests.processes import a_free_port

MANY_OPTIONS = (
    "postgres://alice:s%3Acret@db1.example:5442,db2.example:5443/deliveries"
    "?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=/etc/ssl/root.crt"
    "&application_name=web&connect_timeout=3&options=-c%20statement_timeout%3D5s&keepalives_idle=30"
)


def test_every_option_of_a_multi_host_url_is_kept():
    entry = database_url.parse(MANY_OPTIONS)
    assert (entry["NAME"], entry["USER"], entry["PASSWORD"]) == ("deliveries", "alice", "s:cret")
    assert (entry["HOST"], entry["PORT"]) == ("db1.example,db2.example", "5442,5443")
    assert entry["OPTIONS"] == {
        "target_session_attrs": "read-write",
        "sslmode": "verify-full",
        "sslrootcert": "/etc/ssl/root.crt",
        "application_name": "web",
        "connect_timeout": "3",
        "options": "-c statement_timeout=5s",
        "keepalives_idle": "30",
    }


def test_the_query_string_form_of_several_hosts_is_the_same_database():
    netloc = database_url.parse("postgresql://u@a:1,b:2/db")
    query = database_url.parse("postgresql://u@/db?host=a,b&port=1,2")
    assert netloc == query


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgres://u@h/db?sslmod=require", '"sslmod"'),  # a typo libpq does not know
        ("postgres://u@h/db?conn_max_age=60", '"conn_max_age"'),  # dj-database-url's, not libpq's
        ("mysql://u@h/db", "'mysql'"),
    ],
)
def test_an_option_that_cannot_be_honoured_stops_the_start_naming_it(url, named):
    with pytest.raises(ImproperlyConfigured, match=named) as refused:
        database_url.parse(url)
    assert str(refused.value).startswith("DATABASE_URL: ")


def test_url_of_gives_another_process_the_same_connection():
    entry = database_url.parse(MANY_OPTIONS)
    entry["OPTIONS"].update(pool={"max_size": 4}, prepare_threshold=None)  # Django's own, not libpq's
    again = database_url.parse(database_url.url_of(entry))
    assert again["OPTIONS"] == database_url.parse(MANY_OPTIONS)["OPTIONS"]
    assert {k: again[k] for k in ("NAME", "USER", "PASSWORD", "HOST", "PORT")} == {
        "NAME": "deliveries",
        "USER": "alice",
        "PASSWORD": "s:cret",
        "HOST": "db1.example,db2.example",
        "PORT": "5442,5443",
    }
    assert database_url.parse(database_url.url_of(entry, NAME="other db"))["NAME"] == "other db"


# What the connection a process opens from DATABASE_URL shows of each option (run in a child
# process, so the settings module reads the URL exactly as production's processes do).
_SHOW = """
import json, django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT current_setting('application_name'), current_setting('statement_timeout')")
    application_name, statement_timeout = cursor.fetchone()
info = connection.connection.info
print(json.dumps({"application_name": application_name, "statement_timeout": statement_timeout,
                  "port": info.port, "pooled": connection.pool is not None,
                  "params": info.get_parameters()}))
"""


def _connect_from(url: str, pool_size: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "delivery_project.settings",
        "DJANGO_DB_POOL_MAX_SIZE": pool_size,
        "DJANGO_DB_POOL_TIMEOUT": "2",  # how long the pool tries before a refused connection is an error
    }
    return subprocess.run(
        [sys.executable, "-c", _SHOW], env=env, cwd=Path(settings.BASE_DIR), capture_output=True, text=True, timeout=60
    )


@pytest.mark.integration
@pytest.mark.postgres
@pytest.mark.parametrize("pool_size", ["4", "0"], ids=["pool", "no-pool"])
def test_each_option_reaches_the_connection_with_the_pool_on_or_off(pool_size):
    server = settings.DATABASES["default"]
    closed = a_free_port()  # nothing listens there: libpq must try the next host
    url = database_url.url_of(
        server,
        HOST=f"127.0.0.1,{server['HOST'] or '127.0.0.1'}",
        PORT=f"{closed},{server['PORT'] or 5432}",
        OPTIONS={
            "target_session_attrs": "read-write",
            "application_name": "option-test",
            "connect_timeout": "4",
            "options": "-c statement_timeout=4321",
            "sslmode": "disable",
            "keepalives_idle": "17",
        },
    )
    shown = _connect_from(url, pool_size)
    assert shown.returncode == 0, shown.stderr
    seen = json.loads(shown.stdout)
    assert seen["pooled"] is (pool_size != "0")
    assert seen["application_name"] == "option-test"
    assert seen["statement_timeout"] == "4321ms"
    assert seen["port"] == int(server["PORT"] or 5432)  # the second host, the first being closed
    for option, value in {
        "target_session_attrs": "read-write",
        "connect_timeout": "4",
        "sslmode": "disable",
        "keepalives_idle": "17",
    }.items():
        assert seen["params"].get(option) == value, option


@pytest.mark.integration
@pytest.mark.postgres
@pytest.mark.parametrize("pool_size", ["4", "0"], ids=["pool", "no-pool"])
def test_sslmode_require_is_not_dropped_when_the_server_has_no_ssl(pool_size):
    # This machine's PostgreSQL runs without SSL: an honoured sslmode=require refuses to connect
    # rather than talking in the clear (which is what a dropped option did).
    server = settings.DATABASES["default"]
    refused = _connect_from(
        database_url.url_of(server, OPTIONS={"sslmode": "require", "connect_timeout": "4"}), pool_size
    )
    assert refused.returncode != 0
    assert "SSL" in refused.stderr, refused.stderr[-2000:]


_SETTINGS = """
import json
from django.conf import settings
db = settings.DATABASES["default"]
options = db["OPTIONS"]
print(json.dumps({
    "cursors_off": db["DISABLE_SERVER_SIDE_CURSORS"],
    "prepare": options["prepare_threshold"],
    "server_binding": options["server_side_binding"],
}))
"""


def _settings_with(**env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _SETTINGS],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "delivery_project.settings", **env},
        cwd=Path(settings.BASE_DIR), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_behind_a_transaction_pooler_nothing_lives_in_a_session():
    url = "postgres://app@pgbouncer.internal:6432/deliveries"
    direct = json.loads(_settings_with(DATABASE_URL=url).stdout)
    pooled = json.loads(_settings_with(DATABASE_URL=url, DATABASE_TRANSACTION_POOLER="1").stdout)
    client_bound = json.loads(_settings_with(DATABASE_URL=url, DATABASE_SERVER_SIDE_BINDING="0").stdout)
    assert direct == {"cursors_off": False, "prepare": 5, "server_binding": True}  # psycopg's threshold
    assert client_bound == {"cursors_off": False, "prepare": 2**31 - 1, "server_binding": False}  # publish() only
    assert pooled == {"cursors_off": True, "prepare": None, "server_binding": False}
    refused = _settings_with(DATABASE_URL=f"{url}?options=-c%20statement_timeout%3D5s", DATABASE_TRANSACTION_POOLER="1")
    assert refused.returncode != 0 and "options=... cannot be honoured through a transaction pooler" in refused.stderr


# One process's pool, asked for a connection while its server is away, then back, then away again.
_ATTEMPTS = """
import json, sys, django
django.setup()
from django.db import connection
def attempt():
    try:
        connection.ensure_connection()
        return "ok"
    except Exception as error:
        return str(error)
    finally:
        connection.close()
def until_answered_at_once(most=3):
    # A second attempt, or a third should the pool's own attempt still be in flight after the first
    # caller's timeout (CI, 2026-12-06: seen once in some fifty runs): each waits the whole timeout
    # until the pool has seen an attempt fail.
    seen = []
    while len(seen) < most and not (seen and "after 0.50 sec" in seen[-1]):
        seen.append(attempt())
    return seen
print(json.dumps(until_answered_at_once()), flush=True)
sys.stdin.readline()  # the server is reachable again
seen = []
while "ok" not in seen and len(seen) < 40:  # the pool retries in the background, within 5 s
    seen.append(attempt())
attempt()  # reachable: the success seen above restores the full timeout for this one
print(json.dumps(seen + [connection.pool.timeout]), flush=True)
sys.stdin.readline()  # unreachable again
print(json.dumps(until_answered_at_once()), flush=True)
"""


@pytest.mark.integration
@pytest.mark.postgres
def test_while_its_attempts_fail_the_pool_answers_in_half_a_second_not_its_timeout():
    from outbox_tests.tcp_proxy import TcpProxy

    server = settings.DATABASES["default"]
    proxy = TcpProxy(server["HOST"] or "127.0.0.1", int(server["PORT"] or 5432))  # down: connections refused
    url = database_url.url_of(database_url.parse(settings.DATABASE_URL), HOST="127.0.0.1", PORT=str(proxy.port))
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "delivery_project.settings"}
    env.update(DJANGO_DB_POOL_MAX_SIZE="2", DJANGO_DB_POOL_TIMEOUT="3")
    child = subprocess.Popen(
        [sys.executable, "-c", _ATTEMPTS], env=env, cwd=Path(settings.BASE_DIR), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        first, *then = json.loads(child.stdout.readline())
        assert "after 3.00 sec" in first  # nothing known yet: the whole timeout
        assert "after 0.50 sec" in then[-1], then  # its attempts are refused: answered at once
        proxy.up()
        child.stdin.write("\n")
        child.stdin.flush()
        *back, timeout_once_back = json.loads(child.stdout.readline())
        assert back[-1] == "ok" and all("after 0.50 sec" in seen for seen in back[:-1]), back
        assert timeout_once_back == 3.0  # a success restored the timeout
        proxy.down()
        child.stdin.write("\n")
        child.stdin.flush()
        # The first caller may wait the whole timeout or not, depending on whether the pool's own
        # attempt to refill has already failed; the next one, after a failure, is answered at once.
        then = json.loads(child.stdout.readline())
        assert "after 0.50 sec" in then[-1], then
    finally:
        proxy.down()
        child.kill()
        child.wait(10)
