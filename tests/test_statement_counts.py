"""Statements per handler execution and per accepted request, counted on PostgreSQL.

The counts below are the budget (harness.statement_counts counts them; `manage.py bench` prints
the same table): a change that adds a statement to a handler, a nested `transaction.atomic()`
(a SAVEPOINT and its RELEASE) or a query to the request path fails here, and the table is
changed on purpose or the statement is taken out.
"""

import pytest

from harness import statement_counts
from outbox.testing import hand_over, pending, run_choreography
from tests.factories import delivery_request

pytestmark = [pytest.mark.postgres]

# (subscriber, event type) -> statements of one handler execution on the happy path: drone first,
# then the package, then the flight to its end (tests/deliveries/test_choreography.py's first test).
HANDLER_STATEMENTS = {
    ("deliveries", "drone.arrived"): 7,  # the end withdraws its timers still to fire
    ("deliveries", "drone.position_reported"): 5,  # an ordered stream's cursor moved in one statement, not two
    ("deliveries", "drone.released"): 5,
    ("deliveries", "drone.scheduled"): 7,  # the same; and its delivery.status_changed (scheduled), its only event
    ("deliveries", "package.ready"): 6,
    ("drones", "delivery.completed"): 12,
    ("drones", "delivery.dispatched"): 8,  # the take-off's flight schedule in one INSERT (publish_many), not four
    ("drones", "delivery.requested"): 10,
    ("notifications", "delivery.completed"): 5,  # one INSERT … ON CONFLICT DO NOTHING, not get_or_create's four
    ("notifications", "delivery.dispatched"): 5,
    ("packages", "delivery.completed"): 4,
    ("packages", "delivery.dispatched"): 4,
    ("packages", "delivery.requested"): 6,
    # A customer with no endpoint: one read of them, and the change recorded as heard (one upsert,
    # which an endpoint registered later needs: its messages wait for the changes before theirs).
    ("webhooks", "delivery.status_changed"): 5,
}
# POST /api/deliveryrequests, accepted: token, rate limit, idempotency, the delivery, its events
# (delivery.requested, its two timers and its delivery.status_changed in one INSERT, not four).
REQUEST_STATEMENTS = 7


@pytest.mark.django_db(transaction=True)
def test_each_handler_execution_stays_within_its_statements(fleet):
    counted = statement_counts.one_delivery(body=delivery_request())
    if counted.handlers != HANDLER_STATEMENTS:
        lines = [f"    {key!r}: {count}," for key, count in counted.handlers.items()]
        pytest.fail("statements per handler execution changed; now:\n{\n" + "\n".join(lines) + "\n}")


@pytest.mark.django_db(transaction=True)
def test_an_accepted_request_stays_within_its_statements(customer, fleet):
    counted = statement_counts.one_delivery(client=customer.client, body=delivery_request())
    assert len(counted.request) == REQUEST_STATEMENTS, "\n".join(counted.request)


@pytest.mark.django_db
def test_a_stale_copy_without_a_letter_is_not_looked_up_among_the_letters(customer, fleet, db):
    """Workers reorder a stream's reports as a matter of course (1.8 stale copies a delivery in the
    bench): only the inbox insert, which already says whether the copy has a letter, reads the letters."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from outbox.handling.dispatch import Outcome, dispatch
    from outbox.models import DeadLetter
    from tests.factories import requested

    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))
    first, *_, last = pending("drone.position_reported", correlation_id=delivery_id)
    hand_over(last)

    with CaptureQueriesContext(connection) as statements:
        assert dispatch(subscriber="deliveries", body=first.model_dump(mode="json")) is Outcome.STALE

    letters = DeadLetter._meta.db_table
    reading_letters = [query["sql"] for query in statements.captured_queries if letters in query["sql"]]
    assert len(reading_letters) == 1 and reading_letters[0].startswith("INSERT"), reading_letters
