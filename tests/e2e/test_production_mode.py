"""Production mode as the README runs it: gunicorn, DJANGO_DEBUG=0, the static files collected
and served by the web process itself (WhiteNoise), so the console has its styles; and under
LOG_FORMAT=json every line of every process (web, relay, workers) one JSON object."""

import http.client
import http.cookiejar
import json
import re
import secrets
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from deliveries.models import Delivery
from notifications.models import Notification
from outbox.models import Heartbeat
from tests.factories import Customer, delivery_request
from tests.processes import MANAGE, a_free_port, post_delivery_request
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def fetch(url: str, **headers) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()
    except OSError:
        return 0, {}, b""


def production_env(env: dict, tmp_path: Path) -> dict:
    return {
        **env,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_LOCAL_HTTP": "1",  # plain HTTP on 127.0.0.1, as the README's local recipe runs it
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
    }


def logs_in_over_plain_http(base: str, username: str, password: str) -> bool:
    """The admin login as a browser does it: the CSRF cookie from the form, posted back with it."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = opener.open(f"{base}/admin/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    fields = {"csrfmiddlewaretoken": token, "username": username, "password": password, "next": "/admin/"}
    answer = opener.open(f"{base}/admin/login/", data=urllib.parse.urlencode(fields).encode(), timeout=10)
    return answer.url.endswith("/admin/") and "Log out" in answer.read().decode()


def test_the_console_has_its_styles_under_gunicorn_with_debug_off(env, tmp_path):
    production = production_env(env, tmp_path)
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    subprocess.run([*MANAGE, "collectstatic", "--noinput", "--verbosity", "0"], env=production, check=True, timeout=120)
    port = a_free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        env=production,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: fetch(f"{base}/healthz")[0] == 200, timeout=60, what="gunicorn to answer")
        status, _, page = fetch(f"{base}/admin/login/")
        assert status == 200
        hashed = re.search(rb'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', page)
        assert hashed, page[:2000]  # the page links the file by its content hash: cacheable for ever

        status, headers, _ = fetch(base + hashed.group(1).decode(), **{"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-type"].startswith("text/css")
        assert headers.get("content-encoding") == "gzip"  # compressed at collectstatic
        assert "max-age=315360000" in headers.get("cache-control", "")
        status, headers, _ = fetch(f"{base}/static/admin/css/base.css")
        assert status == 200 and headers["content-type"].startswith("text/css")
        assert logs_in_over_plain_http(base, "ops", "correct horse")
    finally:
        server.terminate()
        server.wait(30)


def test_under_gunicorn_chunked_bodies_oversized_headers_and_offline_docs(env, tmp_path):
    """A JSON body sent chunked (no Content-Length) was read as empty, a 422 naming `body`;
    a header over 8 KB got gunicorn's HTML 431; /api/docs loaded Swagger UI from a CDN, a blank
    page without the internet."""
    production = production_env(env, tmp_path)
    subprocess.run([*MANAGE, "collectstatic", "--noinput", "--verbosity", "0"], env=production, check=True, timeout=120)
    token, port = Customer("alice").token, a_free_port()
    gunicorn = [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--bind", f"127.0.0.1:{port}", "-w", "1"]
    server = subprocess.Popen(gunicorn, env=production)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: fetch(f"{base}/healthz")[0] == 200, timeout=60, what="gunicorn to answer")
        body = json.dumps(delivery_request()).encode()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request("POST", "/api/deliveryrequests", body=iter([body[:100], body[100:]]), headers=headers)
        answer = connection.getresponse()
        assert answer.status == 202, answer.read()
        assert Delivery.objects.count() == 1

        big = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # a header over gunicorn's 8 KB
        big.request("GET", "/api/deliveries", headers={"Authorization": f"Bearer {token}", "X-Padding": "x" * 9000})
        refused = big.getresponse()
        assert (refused.status, refused.getheader("Content-Type")) == (431, "application/json")
        assert json.loads(refused.read())["errors"][0]["field"] == "headers"  # not gunicorn's HTML page

        status, _, page = fetch(f"{base}/api/docs")
        assert status == 200 and b"cdn" not in page.lower()
        script = re.search(rb'src="(/static/ninja/swagger-ui-bundle\.[0-9a-f]{12}\.js)"', page)
        assert script and fetch(base + script.group(1).decode())[0] == 200, page[:2000]
    finally:
        server.terminate()
        server.wait(30)


def json_lines(path: Path) -> list[dict]:
    """Every line of a process's output, each of which must be one JSON object."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    not_json = [line for line in lines if not line.startswith("{")]
    assert not not_json, f"{path.name}: {len(not_json)} of {len(lines)} lines are not JSON: {not_json[:5]}"
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_under_log_format_json_every_process_logs_only_json(env, fleet, tmp_path):
    production = {
        **production_env(env, tmp_path),
        "LOG_FORMAT": "json",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_CONSOLE_SPANS_FILE": str(tmp_path / "spans.jsonl"),
    }
    port, token = a_free_port(), Customer("alice").token
    commands = {
        "web": [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--bind", f"127.0.0.1:{port}", "-w", "1"],
        "relay": [*MANAGE, "relay_outbox", "--progress-every", "0.5"],
        "workers": [*MANAGE, "rundramatiq", "--processes", "1", "--threads", "2"],
    }
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    processes = {}
    try:
        for name, command in commands.items():
            with logs[name].open("w") as log:  # stdout and stderr: the whole of what an operator collects
                processes[name] = subprocess.Popen(command, env=production, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: fetch(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=60, what="gunicorn")
        assert post_delivery_request(port, token) == 202
        delivery = Delivery.objects.get()
        wait_until(
            lambda: Notification.objects.filter(delivery_id=delivery.id, kind="completed").exists(),
            timeout=60,
            what="the delivery to be delivered and its customer told",
        )
        busy_until = timezone.now()
        # Idle now: the relay lives through several of its progress intervals with nothing to relay.
        wait_until(
            lambda: Heartbeat.objects.filter(kind="relay", last_seen__gt=busy_until + timedelta(seconds=2)).exists(),
            timeout=30,
            what="the relay to stay up, idle, for four progress intervals",
        )
        relay_lines_while_idle = len(json_lines(logs["relay"]))
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            process.wait(30)

    web, relay, workers = (json_lines(logs[name]) for name in commands)
    assert any(line["logger"] == "gunicorn.error" and "Listening at" in line["message"] for line in web)
    assert any(line["logger"] == "dramatiq.MainProcess" for line in workers)  # Dramatiq's parent process
    handled = [line for line in workers if line.get("correlation_id") == str(delivery.id) and "outcome" in line]
    assert {line["subscriber"] for line in handled} == {"deliveries", "drones", "packages", "notifications", "webhooks"}
    assert all(line["level"] == "INFO" and line["duration_ms"] >= 0 and line["message_id"] for line in handled)
    assert {(line["subscriber"], line["event_type"]) for line in handled} >= {
        ("drones", "delivery.requested"),
        ("packages", "delivery.requested"),
        ("deliveries", "drone.arrived"),
        ("notifications", "delivery.completed"),
    }
    assert {line["outcome"] for line in handled} <= {"processed", "duplicate", "stale"}
    assert any(line["message"].startswith("relay started") for line in relay)
    progress_after_the_work = [line for line in relay[relay_lines_while_idle:] if "relayed" in line["message"]]
    assert len(progress_after_the_work) == 1 and relay[-1]["message"].startswith("relay stopped")  # the one at the stop
    spans = json_lines(tmp_path / "spans.jsonl")
    assert {span["context"]["trace_id"] for span in spans if span["name"] == "POST api/deliveryrequests"}
    assert not [line for line in web + relay + workers if "context" in line]  # spans are not in the logs
