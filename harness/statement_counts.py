"""Statements per handler execution and per accepted request, counted on the database in use.

Every statement is a round trip, BEGIN, COMMIT and savepoints included. One delivery's happy path
is driven synchronously (the real dispatch, only the broker hop replaced): the drone first, then
the package, then the flight to its end. `tests/test_statement_counts.py` holds the budget and
`manage.py bench` prints the same table. A context's role switch is left out: a worker's thread
keeps its role between messages, and the bench's per-delivery figures (pg_stat_database) count it.
"""

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID, uuid4

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from deliveries.customers import create_customer
from harness.bench_api import a_request_body
from outbox.core.envelope import Envelope
from outbox.handling.dispatch import dispatch
from outbox.models import OutboxMessage
from outbox.testing import owed

ROLE_SWITCHES = ("SET ROLE", "RESET ROLE", "SET LOCAL ROLE")


def work(queries: CaptureQueriesContext) -> list[str]:
    """The statements captured, but for a context's role set or given back."""
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(ROLE_SWITCHES)]


def body_of(envelope: Envelope) -> dict:
    """What a worker is given for `envelope`: its row's wire form (read before any measuring)."""
    return OutboxMessage.objects.get(message_id=envelope.message_id, target_subscriber="").envelope()


def counting(statements: dict[tuple[str, str], list[list[str]]]) -> Callable[[str, Envelope], None]:
    """A hand-over that keeps each handler execution's statements."""

    def hand(subscriber: str, envelope: Envelope) -> None:
        body = body_of(envelope)
        with CaptureQueriesContext(connection) as queries:
            dispatch(subscriber=subscriber, body=body)
        statements[(subscriber, envelope.type)].append(work(queries))

    return hand


@dataclass(frozen=True)
class Counted:
    handlers: dict[tuple[str, str], int]  # (subscriber, event type) -> the most statements of one execution
    runs: dict[tuple[str, str], int]  # (subscriber, event type) -> its executions in the delivery
    request: list[str]  # the accepted POST's statements
    sql: dict[tuple[str, str], list[str]]  # the statements of each one's longest execution

    @property
    def executions(self) -> int:
        return sum(self.runs.values())

    @property
    def per_delivery(self) -> int:
        """Statements of the delivery's handler executions together (each counted at its most)."""
        return sum(self.handlers[key] * runs for key, runs in self.runs.items())


def happy_path(hand: Callable[[str, Envelope], None], delivery_id: UUID) -> None:
    """The drone first, then the package, then the flight to its end (every timer due at once
    under DRONE_SIMULATION_SPEEDUP): each envelope owed handed to one subscriber at a time by `hand`
    (the real dispatch, measured), the broker hop left out."""
    for event_type, to in (
        ("delivery.requested", "drones"),
        ("drone.scheduled", None),
        ("delivery.requested", "packages"),
        ("package.ready", None),
    ):
        for subscriber, envelope in owed(event_type, correlation_id=delivery_id, to=to):
            hand(subscriber, envelope)
    while due := owed(correlation_id=delivery_id, due_only=True):  # then each type in turn, as it comes
        for subscriber, envelope in owed(due[0][1].type, correlation_id=delivery_id):
            hand(subscriber, envelope)


@override_settings(DRONE_SIMULATION_SPEEDUP=1_000_000)  # the flight's timers are due at once
def one_delivery(*, client: Client | None = None, body: dict | None = None) -> Counted:
    """Request a delivery through the API (a new customer unless `client` carries a token; `body`,
    or what the API bench sends) and take it to its end, counting statements. Needs a free drone
    near harness.bench.BASE."""
    if client is None:
        _, token = create_customer(name=f"statement-count-{uuid4().hex[:8]}")
        client = Client(headers={"Authorization": f"Bearer {token}"})
    with CaptureQueriesContext(connection) as request:
        response = client.post("/api/deliveryrequests", body or a_request_body(), content_type="application/json")
    if response.status_code != 202:
        raise RuntimeError(f"the request was refused: {response.status_code} {response.content[:300]!r}")
    statements: dict[tuple[str, str], list[list[str]]] = defaultdict(list)
    happy_path(counting(statements), UUID(response.json()["deliveryId"]))
    executions = sorted(statements.items())
    return Counted(
        handlers={key: max(map(len, runs)) for key, runs in executions},
        runs={key: len(runs) for key, runs in executions},
        request=work(request),
        sql={key: max(runs, key=len) for key, runs in executions},
    )
