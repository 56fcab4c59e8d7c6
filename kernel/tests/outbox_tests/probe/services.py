from uuid import UUID

from django.db import connection, transaction

from outbox.core.publishing import publish
from outbox.core.saving import insert_row
from outbox.placement import atomic as outbox_atomic
from outbox_tests.probe.events import ProbeEchoed, ProbePinged, ProbeSent, ProbeSentCarelessly, ProbeUndoRequested
from outbox_tests.probe.models import Effect, Ping


class Exploded(Exception):
    pass


def ping(
    *,
    n: int,
    fail: dict[str, str] | None = None,
    explode: bool = False,
    correlation_id: UUID | None = None,
    available_at=None,
) -> Ping:
    with transaction.atomic():
        record = Ping.objects.create(n=n)
        publish(
            ProbePinged(n=n, fail=fail or {}),
            stream=f"ping:{record.pk}",
            correlation_id=correlation_id,
            available_at=available_at,
        )
        if explode:
            raise Exploded("after publishing, before commit")
        return record


def record_effect(*, subscriber: str, message_id: UUID, type: str, n: int, echo: bool = False) -> None:
    Effect.objects.create(subscriber=subscriber, message_id=message_id, type=type, n=n)
    if echo:
        publish(ProbeEchoed(n=n + 1), stream=f"echo:{subscriber}")


def refuse_inside_a_service(*, n: int) -> None:
    """A service whose refusal comes after a write, inside `outbox.placement.atomic`."""
    with outbox_atomic("probe"):
        Ping.objects.create(n=n)
        raise Exploded("the service refused")


def insert_a_key_already_there(*, n: int) -> None:
    """A write, then `insert_row()` of a row whose key is there already: an IntegrityError, as the docs say."""
    record = Ping.objects.create(n=n)
    insert_row(Ping(pk=record.pk, n=n))


def run_a_statement_that_fails(*, n: int) -> None:
    """A write, then a service's own SQL that the database refuses (a key already there)."""
    record = Ping.objects.create(n=n)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {Ping._meta.db_table} (id, n) VALUES (%s, %s)", [record.pk, n])


def request_undo(*, n: int, fail: dict[str, str] | None = None) -> None:
    with transaction.atomic():
        publish(ProbeUndoRequested(n=n, fail=fail or {}), stream=f"undo:{n}")


def send(*, n: int, carelessly: bool = False) -> None:
    """Publish something probe_b sends out of the database (`outbox_tests.probe.handlers.sent_outside`)."""
    with transaction.atomic():
        publish(ProbeSentCarelessly(n=n) if carelessly else ProbeSent(n=n), stream=f"send:{n}")


def lose_the_connection() -> None:
    """PostgreSQL ends this session: the transaction and everything in it are gone."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def current_transaction() -> str:
    """PostgreSQL's id of the top-level transaction this runs in, from inside any savepoint."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()::text")
        return cursor.fetchone()[0]


def current_role() -> str:
    """The role PostgreSQL checks this transaction's privileges against."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        return cursor.fetchone()[0]


def read_another_contexts_table() -> int:
    """What no context's code should do: a query into another context's table (drones')."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM drones_drone")
        return cursor.fetchone()[0]
