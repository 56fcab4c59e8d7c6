"""Statements per handler execution and per accepted request, counted on PostgreSQL.

Every statement is a round trip to the database, and round trips are what a handler spends its
time on (docs/performance.md). The counts below are the budget: a change that adds a statement
to a handler, a nested `transaction.atomic()` (a SAVEPOINT and its RELEASE) or a query to the
request path fails here, and the table is changed on purpose or the statement is taken out.
BEGIN and COMMIT count (Django's query log has them, and they are round trips too), as do savepoints.
"""

from collections import defaultdict

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from outbox.dispatch import dispatch
from outbox.subscriptions import subscribers_of
from tests.choreography import Choreography
from tests.factories import requested

pytestmark = [pytest.mark.postgres]

# (subscriber, event type) -> statements of one handler execution on the happy path: drone first,
# then the package, then the flight to its end (tests/deliveries/test_choreography.py's first test).
HANDLER_STATEMENTS = {
    ("deliveries", "drone.arrived"): 8,
    ("deliveries", "drone.position_reported"): 9,
    ("deliveries", "drone.released"): 7,
    ("deliveries", "drone.scheduled"): 9,
    ("deliveries", "package.ready"): 8,
    ("drones", "delivery.completed"): 14,
    ("drones", "delivery.dispatched"): 13,
    ("drones", "delivery.requested"): 12,
    ("notifications", "delivery.completed"): 10,
    ("notifications", "delivery.dispatched"): 10,
    ("packages", "delivery.completed"): 6,
    ("packages", "delivery.dispatched"): 6,
    ("packages", "delivery.requested"): 8,
}
# POST /api/deliveryrequests, accepted: token, rate limit, idempotency, the delivery, its events.
REQUEST_STATEMENTS = 9


class CountingChoreography(Choreography):
    """The test choreography, with each handler execution's statements counted."""

    def __init__(self):
        super().__init__()
        self.statements: dict[tuple[str, str], list[list[str]]] = defaultdict(list)

    def hand_over(self, row, *, only=None, dead_letter_expected=False):
        for subscriber in subscribers_of(row.type):
            if only in (None, subscriber) and (row.id, subscriber) not in self.handed_over:
                self.handed_over.add((row.id, subscriber))
                with CaptureQueriesContext(connection) as queries:
                    dispatch(subscriber=subscriber, body=row.envelope())
                self.statements[(subscriber, row.type)].append([q["sql"] for q in queries.captured_queries])


def _happy_path(customer) -> tuple[CountingChoreography, list[str]]:
    with CaptureQueriesContext(connection) as request:
        delivery_id = requested(customer)
    choreography = CountingChoreography()
    choreography.deliver("delivery.requested", delivery_id, only="drones")
    choreography.deliver("drone.scheduled", delivery_id)
    choreography.deliver("delivery.requested", delivery_id, only="packages")
    choreography.deliver("package.ready", delivery_id)
    choreography.settle(delivery_id)
    return choreography, [q["sql"] for q in request.captured_queries]


def _table(choreography: CountingChoreography) -> dict[tuple[str, str], int]:
    return {key: max(len(run) for run in runs) for key, runs in sorted(choreography.statements.items())}


@pytest.mark.django_db(transaction=True)
def test_each_handler_execution_stays_within_its_statements(customer, fleet):
    choreography, _ = _happy_path(customer)
    counted = _table(choreography)
    if counted != HANDLER_STATEMENTS:
        lines = [f"    {key!r}: {count}," for key, count in counted.items()]
        pytest.fail("statements per handler execution changed; now:\n{\n" + "\n".join(lines) + "\n}")


@pytest.mark.django_db(transaction=True)
def test_an_accepted_request_stays_within_its_statements(customer, fleet):
    _, request = _happy_path(customer)
    assert len(request) == REQUEST_STATEMENTS, "\n".join(request)
