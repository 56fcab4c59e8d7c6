"""Statements per handler execution and per accepted request, counted on the database in use.

Every statement is a round trip, and round trips are what a handler spends its time on
(docs/performance.md). One delivery's happy path is driven synchronously (the real dispatch,
only the broker hop replaced): the drone first, then the package, then the flight to its end.
BEGIN, COMMIT and savepoints count: Django's query log has them, and they are round trips too.
`tests/test_statement_counts.py` holds the budget; `manage.py bench` prints the same table.

A context's role (outbox.placement.roles) is left out: driven from here, outside a worker,
each handler sets its context's role and gives it back (two statements); a worker's thread keeps
it for its next message and sets it only when the context changes, and the API's pooled
connections keep the deliveries context's, so that what a handler or a request costs there is
what is counted, and the bench's per-delivery figures (pg_stat_database) include the switches.
"""

from collections import defaultdict
from dataclasses import dataclass
from uuid import UUID, uuid4

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from deliveries.customers import create_customer
from harness.bench_api import a_request_body
from harness.choreography import Choreography

ROLE_SWITCHES = ("SET ROLE", "RESET ROLE", "SET LOCAL ROLE")


def work(queries: CaptureQueriesContext) -> list[str]:
    """The statements captured, but for a context's role set or given back."""
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(ROLE_SWITCHES)]


class CountingChoreography(Choreography):
    """The synchronous choreography, with each handler execution's statements kept."""

    def __init__(self):
        super().__init__()
        self.statements: dict[tuple[str, str], list[list[str]]] = defaultdict(list)

    def dispatch(self, subscriber, row):
        with CaptureQueriesContext(connection) as queries:
            super().dispatch(subscriber, row)
        self.statements[(subscriber, row.type)].append(work(queries))


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


def happy_path(choreography: Choreography, delivery_id: UUID) -> None:
    """The drone first, then the package, then the flight to its end (every timer due at once
    under DRONE_SIMULATION_SPEEDUP)."""
    choreography.deliver("delivery.requested", delivery_id, only="drones")
    choreography.deliver("drone.scheduled", delivery_id)
    choreography.deliver("delivery.requested", delivery_id, only="packages")
    choreography.deliver("package.ready", delivery_id)
    choreography.settle(delivery_id)


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
    choreography = CountingChoreography()
    happy_path(choreography, UUID(response.json()["deliveryId"]))
    executions = sorted(choreography.statements.items())
    return Counted(
        handlers={key: max(map(len, runs)) for key, runs in executions},
        runs={key: len(runs) for key, runs in executions},
        request=work(request),
        sql={key: max(runs, key=len) for key, runs in executions},
    )
