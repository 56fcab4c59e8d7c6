"""`save_fields()` and `insert_row()`: what `save(update_fields=...)` and `save(force_insert=True)`
write, from statements written once per shape."""

import uuid
from datetime import timedelta

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Upper
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from outbox_tests.probe.events import ProbeEchoed

from deliveries.customers import create_customer
from deliveries.models import Delivery
from drones.models import Drone
from drones.services import seed_fleet
from outbox.core.publishing import publish
from outbox.core.saving import insert_row, save_fields
from outbox.models import InboxMessage, OutboxMessage
from packages.models import Package

CHANGED = ("type", "payload", "available_at", "causation_id", "claimed_by", "send_attempts", "recipients")


def _published(n: int) -> OutboxMessage:
    with transaction.atomic():
        return publish(ProbeEchoed(n=n), stream=f"save:{uuid.uuid4().hex[:8]}")


AVAILABLE_AT = timezone.now() + timedelta(days=3)
CAUSATION = uuid.uuid4()


def _change(row: OutboxMessage) -> None:
    row.type, row.payload = "probe.changed", {"n": 2, "nested": ["ü", None, 1.5]}
    row.available_at = AVAILABLE_AT
    row.causation_id, row.claimed_by, row.send_attempts, row.recipients = CAUSATION, "me", 4, ["a", "b"]


@pytest.mark.django_db
def test_it_writes_what_save_update_fields_writes_and_nothing_else():
    mine, theirs = _published(1), _published(1)
    for row in (mine, theirs):
        _change(row)
        row.stream = "not written: not named"
    save_fields(mine, CHANGED)
    theirs.save(update_fields=CHANGED)

    mine_read, theirs_read = OutboxMessage.objects.get(pk=mine.pk), OutboxMessage.objects.get(pk=theirs.pk)
    for name in CHANGED:  # JSON, an aware time, a UUID, text and numbers, each as the ORM wrote it
        assert getattr(mine_read, name) == getattr(theirs_read, name) == getattr(mine, name), name
    assert mine_read.stream.startswith("save:") and theirs_read.stream.startswith("save:")


@pytest.mark.django_db
def test_auto_now_moves_as_with_save_and_attnames_are_taken():
    seed_fleet(count=1, latitude=25.03, longitude=121.56)
    drone = Drone.objects.get()
    before = drone.updated_at
    drone.status, drone.delivery_id = Drone.Status.RESERVED, uuid.uuid4()
    save_fields(drone, ["status", "delivery_id", "updated_at"])

    read = Drone.objects.get(pk=drone.pk)
    assert (read.status, read.delivery_id) == (Drone.Status.RESERVED, drone.delivery_id)
    assert read.updated_at == drone.updated_at > before


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_statement_is_one_update_of_the_named_columns():
    row = _published(2)
    _change(row)
    with CaptureQueriesContext(connection) as statements:
        save_fields(row, ["send_attempts", "claimed_by"])
    assert [query["sql"].split(" SET ")[0] for query in statements.captured_queries] == [
        'UPDATE "outbox_outboxmessage"'
    ]
    assert statements.captured_queries[0]["sql"].count("=") == 3  # two columns and the key


@pytest.mark.django_db
def test_a_row_that_is_gone_fails_as_save_update_fields_does():
    row = _published(3)
    OutboxMessage.objects.filter(pk=row.pk).delete()
    row.send_attempts = 9
    with pytest.raises(DatabaseError, match="did not affect any rows"):
        save_fields(row, ["send_attempts"])


@pytest.mark.django_db
def test_an_expression_goes_through_save_and_an_unknown_field_is_refused():
    row = _published(4)
    row.send_attempts = F("send_attempts") + 2
    save_fields(row, ["send_attempts"])
    assert OutboxMessage.objects.get(pk=row.pk).send_attempts == 2

    with pytest.raises(ValueError, match="no field nonsense"):
        save_fields(row, ["nonsense"])


def _a_delivery(customer, **changes) -> Delivery:
    """Every kind of column: JSON (nested, non-ASCII), aware times, UUIDs, a float, a key to a customer."""
    fields = {
        "customer": customer,
        "pickup_location": {"latitude": 25.03, "longitude": 121.56, "note": ["ü", None, 1.5]},
        "dropoff_location": {"latitude": 25.04, "longitude": 121.57},
        "pickup_time": AVAILABLE_AT,
        "deadline": AVAILABLE_AT + timedelta(hours=2),
        "expedited": True,
        "package_id": uuid.uuid4(),
        "package_size": "Small",
        "package_weight_kg": 1.25,
        "compensations": ["drone_released"],
        "idempotency_key": None,
        **changes,
    }
    return Delivery(**fields)


@pytest.mark.django_db
def test_insert_row_writes_what_save_force_insert_writes():
    customer, _ = create_customer(name=f"insert-{uuid.uuid4().hex[:8]}")
    mine, theirs = _a_delivery(customer), _a_delivery(customer)
    insert_row(mine)
    theirs.save(force_insert=True)

    assert mine.id and not mine._state.adding  # its key taken from the default, as save() takes it
    mine_read, theirs_read = Delivery.objects.get(pk=mine.pk), Delivery.objects.get(pk=theirs.pk)
    for field in Delivery._meta.concrete_fields:
        if field.name in ("id", "package_id", "created_at", "updated_at"):  # one customer, one package each
            continue
        assert getattr(mine_read, field.attname) == getattr(theirs_read, field.attname), field.name
    assert mine_read.package_id == mine.package_id
    assert mine_read.created_at == mine.created_at and mine_read.updated_at == mine.updated_at  # auto_now(_add)
    assert mine.created_at is not None


@pytest.mark.django_db
def test_a_key_already_there_is_an_integrity_error_never_an_update():
    customer, _ = create_customer(name=f"insert-{uuid.uuid4().hex[:8]}")
    first = _a_delivery(customer, package_size="Small")
    insert_row(first)
    again = _a_delivery(customer, id=first.id, package_size="Large")
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_row(again)
    assert Delivery.objects.get(pk=first.id).package_size == "Small"


@pytest.mark.django_db
def test_a_key_the_database_chooses_is_read_back_as_save_reads_it():
    inbox = InboxMessage(subscriber="probe", message_id=uuid.uuid4(), type="probe.echoed", correlation_id=uuid.uuid4())
    insert_row(inbox)
    assert inbox.pk is not None and InboxMessage.objects.get(pk=inbox.pk).message_id == inbox.message_id


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_insert_is_one_statement_of_every_column():
    customer, _ = create_customer(name=f"insert-{uuid.uuid4().hex[:8]}")
    delivery = _a_delivery(customer)
    with CaptureQueriesContext(connection) as statements:
        insert_row(delivery)
    [statement] = [query["sql"] for query in statements.captured_queries]
    assert statement.startswith('INSERT INTO "deliveries_delivery" (')
    assert statement.count("%s") == 0 and statement.count(", ") >= len(Delivery._meta.concrete_fields) - 1


@pytest.mark.django_db
def test_insert_row_hands_a_value_that_is_an_expression_to_save_and_the_database_computes_it():
    """A key given (no reason to go through save() but the expression): bound as a parameter, an
    expression is no value a driver can send; save(force_insert=True) writes it into the SQL."""
    package = Package(
        delivery_id=uuid.uuid4(),
        status=Package.Status.READY,
        weight_kg=Value(1.25) * Value(2.0),
        tag=Upper(Value("fragile")),
    )
    insert_row(package)

    read = Package.objects.get(pk=package.pk)
    assert (read.weight_kg, read.tag, read.status) == (2.5, "FRAGILE", "ready")
    assert not package._state.adding and read.created_at is not None
