"""Commands that accept nonsense: every management command refuses a bad argument
before it does anything, in one readable line and a non-zero exit status, never a traceback.

Each case runs the command as the operator would, in a process of its own on this run's database,
or through call_command where that is the same and quicker, and checks that nothing was made or
changed. `create_roles` takes no values of its own: its case is an unknown option, which argparse
refused already."""

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from outbox_tests.letters import a_dead_letter

from deliveries.models import Customer, CustomerToken
from drones.models import Drone
from outbox.models import DeadLetter, OutboxMessage
from tests import factories
from tests.processes import MANAGE, a_free_port

pytestmark = pytest.mark.integration

# (argv, what the refusal says, how it is run); {placeholders} are filled in by `given`. ALONE: as
# the operator runs it, in a process of its own: the commands that would otherwise start a
# system, a relay or a worker inside the test, and the examples that exited 0 or in a
# traceback. CALLED: through call_command, whose CommandError is the one line manage.py prints.
ALONE, CALLED = "alone", "called"
NONSENSE = [
    (["seed_fleet", "-5"], "argument count: must be at least 1, not -5", ALONE),
    (["seed_fleet", "100000000"], "argument count: must be at most 100000, not 100000000", ALONE),
    (["seed_fleet", "21", "--latitude", "200", "--spread-km", "-3"], "--latitude must be between -90 and 90", ALONE),
    (["seed_fleet", "21", "--spread-km", "-3"], "--spread-km must be at least 0, not -3", CALLED),
    (["seed_fleet", "3", "--latitude", "89.99", "--spread-km", "5"], "would reach past the pole", CALLED),
    (["create_customer", ""], "a customer needs a name", ALONE),
    (["create_customer", "bob", "--expires-in-days", "-1"], "argument --expires-in-days: must be more than 0", CALLED),
    (["customer_token", "rotate", "alice", "--expires-in-days", "-1"], "argument --expires-in-days: must be", CALLED),
    (["customer_token", "revoke", "alice", "--grace-minutes", "30"], "are for rotate, not revoke", CALLED),
    (["sweep_unacknowledged", "--limit", "-1"], "argument --limit: must be at least 1, not -1", ALONE),
    (["relay_outbox", "--once", "--batch-size", "0"], "argument --batch-size: must be at least 1, not 0", ALONE),
    (["prune_messages", "--older-than-days", "nan"], "argument --older-than-days: 'nan' is not a number", CALLED),
    (["prune_webhooks", "--batch-size", "0"], "argument --batch-size: must be at least 1, not 0", CALLED),
    (["dead_letters", "replay", "999999"], "nothing replayed: there is no dead letter 999999", CALLED),
    (
        ["dead_letters", "replay", "{letter}", "999999"],
        "CommandError: nothing replayed: there is no dead letter 999999",
        ALONE,
    ),
    (["dead_letters", "discard", "{letter}"], "discard needs a --note saying why", CALLED),
    (["export_event_schemas", "--directory", "{a_file}"], "cannot write the event schemas to {a_file}", CALLED),
    (["export_asyncapi", "--output", "{a_file}/asyncapi.json"], "cannot write the AsyncAPI document to", CALLED),
    (["show_routes", "--format", "png"], "argument --format: invalid choice: 'png'", CALLED),
    (["create_roles", "--bogus"], "unrecognized arguments: --bogus", CALLED),
    (["run_all", "--addr", "nonsense"], "argument --addr: 'nonsense' is not HOST:PORT", ALONE),
    (["rundramatiq", "--processes", "0"], "argument --processes/-p: must be at least 1, not 0", ALONE),
    (["rundramatiq", "--queues", "nosuchqueue"], "no such queue: nosuchqueue (the queues are", ALONE),
    (["bench", "--runs", "0", "--history", "0"], "argument --runs: must be at least 1, not 0", ALONE),
    (["chaos", "--port", "70000"], "argument --port: must be at most 65535, not 70000", ALONE),
    (["chaos", "--rabbitmq-cluster", "2"], "argument --rabbitmq-cluster: must be at least 3, not 2", ALONE),
    (["simulate", "--deliveries", "-1"], "argument --deliveries: must be at least 1, not -1", ALONE),
    (["simulate", "--url", "127.0.0.1:8000"], "argument --url: '127.0.0.1:8000' is not an http:// or", ALONE),
    (["simulate", "--url", "{nobody_listens}"], "could not reach {nobody_listens}: connection refused", ALONE),
    (["simulate", "--url", "{production}"], "{production} redirected to https://", ALONE),
    (["simulate", "--url", "{a_web_page}"], "{a_web_page} answered 200 with text/html, not the customer", ALONE),
]


def cases(how: str):
    chosen = [(argv, refusal) for argv, refusal, where in NONSENSE if where == how]
    return pytest.mark.parametrize(("argv", "refusal"), chosen, ids=[" ".join(argv) for argv, _ in chosen])


class NotTheApi(BaseHTTPRequestHandler):
    """What a wrong --url meets: under /production a server in production mode, which sends plain
    HTTP to HTTPS (SECURE_SSL_REDIRECT); anywhere else an HTML page."""

    def do_GET(self):
        if self.path.startswith("/production/"):
            self.send_response(301)
            self.send_header("Location", f"https://{self.headers['Host']}{self.path.removeprefix('/production')}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        page = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def not_the_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotTheApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def given(db, tmp_path, not_the_api) -> dict:
    """A customer alice with a token, an open dead letter, a file where a directory is wanted, and
    URLs where no customer API answers. Committed where a case runs in a process of its own (`env`
    asks for a transactional database)."""
    factories.Customer("alice")
    a_file = tmp_path / "schemas"
    a_file.write_text("not a directory")
    return {
        "letter": a_dead_letter().pk,
        "a_file": str(a_file),
        "nobody_listens": f"http://127.0.0.1:{a_free_port()}/",
        "production": f"{not_the_api}/production",
        "a_web_page": f"{not_the_api}/index",
    }


def what_there_is() -> dict:
    return {
        "customers": sorted(Customer.objects.values_list("name", flat=True)),
        "tokens": list(CustomerToken.objects.order_by("pk").values_list("prefix", "expires_at", "revoked_at")),
        "drones": Drone.objects.count(),
        "dead letters": list(DeadLetter.objects.order_by("pk").values_list("pk", "status")),
        "outbox": OutboxMessage.objects.count(),
    }


@cases(ALONE)
def test_a_command_refuses_nonsense_in_one_line_and_does_nothing(argv, refusal, given, env):
    argv, refusal = [part.format(**given) for part in argv], refusal.format(**given)
    before = what_there_is()

    run = subprocess.run([*MANAGE, *argv], env=env, capture_output=True, text=True, timeout=180)

    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert lines and refusal in lines[-1], run.stderr
    if lines[-1].startswith("CommandError: "):  # refused by the command in that one line, exit status 1
        assert [line for line in lines if line.startswith("CommandError")] == lines[-1:], run.stderr
    else:  # refused by argparse: its usage, then "manage.py X: error: argument ...", exit status 2
        assert run.returncode == 2 and lines[-1].startswith(f"manage.py {argv[0]}: error: "), run.stderr
    assert what_there_is() == before


@cases(CALLED)
def test_a_command_called_with_nonsense_raises_one_line_and_does_nothing(argv, refusal, given):
    argv, refusal = [part.format(**given) for part in argv], refusal.format(**given)
    before = what_there_is()

    with pytest.raises(CommandError) as refused:
        call_command(*argv, stdout=StringIO(), stderr=StringIO())

    assert refusal in str(refused.value) and "\n" not in str(refused.value)
    assert what_there_is() == before


def test_a_caller_passing_values_to_call_command_is_refused_the_same(db):
    """argparse never sees call_command's keyword values (the chaos rig seeds its fleet so): the
    fleet's whereabouts are checked by the command itself."""
    with pytest.raises(CommandError, match="--latitude must be between -90 and 90, not 200"):
        call_command("seed_fleet", 21, latitude=200, spread_km=3)
    with pytest.raises(CommandError, match="--longitude must be between -180 and 180, not -200"):
        call_command("seed_fleet", 21, longitude=-200)
    assert not Drone.objects.exists()


def test_simulate_without_the_dev_extra_says_what_to_install_not_a_traceback(tmp_path):
    """From a checkout installed with `pip install .` (the README's production step),
    simulate died with `ModuleNotFoundError: No module named 'rich'`."""
    without_rich = (
        "import sys; sys.modules['rich'] = None; "  # as if not installed: importing it raises ImportError
        "from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'simulate', '--deliveries', '1'])"
    )
    ran = subprocess.run(
        [sys.executable, "-c", without_rich],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "delivery_project.settings"},
    )

    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "CommandError: simulate is a workshop tool and needs rich: install the dev extra" in ran.stderr
