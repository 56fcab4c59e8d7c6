"""`publish()`: append an event to the outbox inside the caller's transaction."""

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID, uuid4

import psycopg
from django.conf import settings
from django.db import connections, models, transaction
from django.db.backends.utils import CursorDebugWrapper
from django.utils import timezone
from psycopg.types.json import Jsonb

from outbox.core import wake_up, working_database
from outbox.core.contracts import Event
from outbox.core.envelope import Envelope
from outbox.core.subscriptions import subscribers_of
from outbox.models import OutboxMessage, Stream
from outbox.observability import tracing

_handling: ContextVar[Envelope | None] = ContextVar("outbox_handling", default=None)


class PublishOutsideTransaction(RuntimeError):
    """An event published outside `transaction.atomic()` could outlive a rolled-back change."""


class EventTooLarge(ValueError):
    """An envelope over OUTBOX_MAX_EVENT_BYTES: cloud brokers refuse large messages (256 KB on
    some), and an event should carry facts, not documents."""


def publish(
    event: Event,
    *,
    stream: str,
    # Given, it wins over the handled message's: another story starts (a resource one story freed, taken by the next).
    correlation_id: UUID | None = None,
    available_at: datetime | None = None,
    using: str | None = None,
) -> OutboxMessage:
    """Append `event` to the outbox; it is relayed once the surrounding transaction commits. Inside a handler it
    inherits the handled message's correlation id, names it as its cause and is one hop further from the origin.
    `available_at` delays relaying, which is how timeouts are scheduled."""
    [row] = publish_many(
        [event], stream=stream, correlation_id=correlation_id, available_at=[available_at], using=using
    )
    return row


def publish_many(
    events: Sequence[Event],
    *,
    stream: str,
    correlation_id: UUID | None = None,
    available_at: Sequence[datetime | None] | None = None,
    using: str | None = None,
) -> list[OutboxMessage]:
    """Append several events to one stream, numbered in the order given, in one statement: what `publish()` does
    for each, at one round trip for all. `available_at`, if given, holds one time or None for each event; `using`
    is the database the kernel works in (its caller's `atomic()`'s; outbox.core.working_database)."""
    connection = connections[using or working_database.current()]
    if not connection.in_atomic_block:
        types = ", ".join(event.type for event in events)
        raise PublishOutsideTransaction(
            f"publish({types}) must run inside transaction.atomic() together with the state change it announces"
        )
    if not events:
        return []
    times = list(available_at) if available_at is not None else [None] * len(events)
    if len(times) != len(events):
        raise ValueError(f"{len(events)} events but {len(times)} times in available_at")
    cause = _handling.get()
    now = timezone.now()
    correlation_id = correlation_id or (cause.correlation_id if cause else uuid4())
    # A correlation id given explicitly wins; the new story keeps the cause but counts hops from 0 again (outbox_row),
    # since a chain that crosses into a new story is work, not a loop.
    same_story = cause is not None and cause.correlation_id == correlation_id
    rows, traced = [], tracing.active()
    for event, at in zip(events, times, strict=True):
        # No exporter (the default): no span to open, name or fill.
        span = (
            _NOT_TRACED
            if not traced
            else tracing.publishing(
                event.type,
                new_story=cause is not None and not same_story,
                attributes={"messaging.event_type": event.type, "stream": stream},
            )
        )
        with span as current:
            row = outbox_row(
                event,
                stream=stream,
                correlation_id=correlation_id,
                cause=cause,
                same_story=same_story,
                available_at=at,
                now=now,
            )
            if current is not None:
                current.set_attribute("message_id", str(row.message_id))
        rows.append(row)
    _append(rows, due_now=[at is None for at in times], connection=connection)
    return rows


_NOT_TRACED = nullcontext()


def withdraw_scheduled(*, stream: str, using: str | None = None) -> int:
    """Take back the events of `stream` still scheduled for later (timers not yet due), in the caller's transaction
    with the change that makes them moot, so none fires for nothing or is listed as pending. Returns how many.
    A timer already due is left to the relay, which may be sending it: its handler must still find it moot."""
    using = using or working_database.current()
    connection = connections[using]
    if not connection.in_atomic_block:
        raise PublishOutsideTransaction(f"withdraw_scheduled({stream}) must run inside transaction.atomic()")
    # As SQL: the ORM's delete() built the query and looked for cascades and signals (the outbox has
    # neither) for every story that ends, at more CPU than the DELETE.
    # "Later" on the database's clock, which the relays read too: an event due at once carries the database's
    # time, and a host whose clock is behind would see it as still to come and delete it unsent.
    sql, params = _WITHDRAW, [stream]
    if connection.vendor != "postgresql":  # one host (SQLite, the embedded default): its clock is the one
        sql, params = _WITHDRAW_BY_HOST_CLOCK, [stream, _available_at.get_db_prep_value(timezone.now(), connection)]
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(sql.format(table=connection.ops.quote_name(OutboxMessage._meta.db_table)), params)
        return cursor.rowcount


# clock_timestamp(), read as each row is looked at, is later than the start of any transaction whose
# row this statement sees (committed before its snapshot): now(), this transaction's start, is not.
# target_subscriber = '': the stream's own events only, never a replay or a copy the sweep sends again,
# which are owed to one subscriber whatever the story did since.
_WITHDRAW = (
    "DELETE FROM {table} WHERE stream = %s AND target_subscriber = '' AND published_at IS NULL "
    "AND available_at > clock_timestamp()"
)
_WITHDRAW_BY_HOST_CLOCK = (
    "DELETE FROM {table} WHERE stream = %s AND target_subscriber = '' AND published_at IS NULL AND available_at > %s"
)
_available_at = OutboxMessage._meta.get_field("available_at")


def _append(rows: list[OutboxMessage], *, due_now: list[bool], connection) -> None:
    """Insert `rows` (one stream's), numbered in their stream, refusing one too large for the brokers."""
    for row in rows:
        _refuse_too_large(row)
    using = connection.alias
    if connection.vendor == "postgresql":  # its trigger sends the relay a NOTIFY
        _insert_numbered(rows, due_now=due_now, connection=connection)
        return
    _nudge_the_relay_on_commit(using)
    for row in rows:
        row.sequence = _next_sequence(row.stream, using=using)
        row.save(using=using, force_insert=True)


# What an envelope holds beside its payload is bounded by its columns' lengths (type, stream, ids,
# times, numbers) and the trace context's limits: well under this many bytes of JSON.
_ENVELOPE_BESIDE_PAYLOAD = 4096


def _refuse_too_large(row: OutboxMessage) -> None:
    """EventTooLarge for an envelope over OUTBOX_MAX_EVENT_BYTES serialized. The payload is what
    grows: while it is far enough under the limit, its JSON (which psycopg must write anyway, and
    gets here written) settles it; only near the limit is the whole envelope serialized to know."""
    limit = settings.OUTBOX_MAX_EVENT_BYTES
    row._payload_json = payload = _payload_json(row)  # type: ignore[attr-defined]  # kept for the INSERT
    if len(payload) + _ENVELOPE_BESIDE_PAYLOAD <= limit:  # json.dumps writes ASCII: a character a byte
        return
    size = len(json.dumps(row.envelope(), separators=(",", ":")).encode())
    if size > limit:
        raise EventTooLarge(f"{row.type} is {size:,} bytes serialized, over OUTBOX_MAX_EVENT_BYTES ({limit:,})")


def outbox_row(
    event: Event,
    *,
    stream: str,
    correlation_id: UUID,
    now: datetime,
    cause: Envelope | None = None,
    same_story: bool = False,
    available_at: datetime | None = None,
) -> OutboxMessage:
    """The unsaved row that carries `event` (its sequence is numbered when it is inserted)."""
    values = {
        **_ROW_DEFAULTS,
        "message_id": uuid4(),
        "type": event.type,
        "version": event.version,
        "source": event.source(),
        "occurred_at": available_at or now,
        "correlation_id": correlation_id,
        "causation_id": cause.message_id if cause else None,
        "hops": cause.hops + 1 if cause is not None and same_story else 0,
        "stream": stream,
        "sequence": 0,
        "payload": event.model_dump(mode="json"),
        "available_at": available_at or now,
        "recipients": subscribers_of(event.type),
        "trace_context": tracing.trace_context(),
    }
    # Positional, in the columns' order, as Django builds a row it reads: half the CPU of keywords.
    return OutboxMessage(*[values[attname] for attname in _ROW_COLUMNS])  # type: ignore[misc]


_ROW_COLUMNS = tuple(field.attname for field in OutboxMessage._meta.concrete_fields)
# Every column outbox_row() does not set: none has a default that must be made anew for each row.
_ROW_DEFAULTS = {
    field.attname: None if field.primary_key else field.get_default()
    for field in OutboxMessage._meta.concrete_fields
    if field.attname not in {"message_id", "recipients", "trace_context"}
}


def _payload_json(row: OutboxMessage) -> str:
    """The payload as the JSON the INSERT sends (psycopg's and Django's default dumps: ASCII, \\u escapes)."""
    return json.dumps(row.payload, separators=(",", ":"))


def _as_is(json_text: str) -> str:
    return json_text


def numbered_insert(rows: list[OutboxMessage], *, connection, due_now: list[bool]) -> tuple[str, list]:
    """The one statement that numbers `rows` (one stream's, in order) and inserts them, with its parameters
    (PostgreSQL): the stream's counter moves by their number, and each row takes its place below the new last.
    Public so that a benchmark can send the same from bare psycopg, as publish()'s reference."""
    sql, bound = _numbered_insert_shape(connection, tuple(due_now))
    params: list[Any] = [rows[0].stream]
    for row, fields in zip(rows, bound, strict=True):
        for attname, field in fields:
            if attname == "payload":  # written once, when its size was checked: sent as it is
                payload = getattr(row, "_payload_json", None) or _payload_json(row)
                params.append(Jsonb(payload, dumps=_as_is))
                continue
            value = getattr(row, attname)
            params.append(value if field is None or value is None else field.get_db_prep_save(value, connection))
    return sql, params


# What psycopg adapts from the Python value itself, as Django's conversion would hand it over
# unchanged on PostgreSQL (a str, a UUID, an int): their conversion is skipped. The others (JSON,
# which needs psycopg's Jsonb wrapper; a datetime, which Django makes aware) go through Django's.
_BOUND_AS_IS = (models.CharField, models.UUIDField, models.IntegerField)
# The relay's and the sweep's columns, which a new row always has at their defaults (outbox_row()):
# written into the statement, not bound, they keep three events (an accepted request's) within
# psycopg's 50 parameters, past which it parses the statement's text anew on every execution.
_AT_THEIR_DEFAULTS = {
    field.attname: {None: "NULL", "": "''", 0: "0"}[field.get_default()]
    for field in OutboxMessage._meta.concrete_fields
    if field.attname
    in (
        "published_at",
        "claimed_until",
        "claimed_by",
        "send_attempts",
        "target_subscriber",
        "acknowledged_at",
        "resends",
    )
}
_shapes: dict[tuple, tuple[str, tuple]] = {}


def _numbered_insert_shape(connection, due_now: tuple[bool, ...]) -> tuple[str, tuple]:
    """The statement's text for rows due (or not) as `due_now` says, and for each row the fields it binds (attname,
    and the field whose conversion the value needs, or None). Built once per shape, of which a handful occur:
    quoting every column and converting every value costs Django more than psycopg spends sending it."""
    key = (connection.vendor, due_now)
    shape = _shapes.get(key)
    if shape is not None:
        return shape
    fields = [f for f in OutboxMessage._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    streams, outbox = quote(Stream._meta.db_table), quote(OutboxMessage._meta.db_table)
    values, bound = [], []
    for place, due in enumerate(due_now):
        below_last = len(due_now) - 1 - place
        computed = {
            **_AT_THEIR_DEFAULTS,
            "stream": "(SELECT name FROM numbered)",
            "sequence": "(SELECT last_sequence FROM numbered)" + (f" - {below_last}" if below_last else ""),
            # Due on the database's clock, which the relays read too: a host whose clock runs ahead holds nothing back.
            **({"available_at": "now()"} if due else {}),
        }
        values.append("(" + ", ".join(computed.get(f.attname, "%s") for f in fields) + ")")
        bound.append(
            tuple((f.attname, None if isinstance(f, _BOUND_AS_IS) else f) for f in fields if f.attname not in computed)
        )
    sql = (
        f"WITH numbered AS ({_NUMBER_IN_STREAM.format(table=streams, count=len(due_now))}) "
        f"INSERT INTO {outbox} ({', '.join(quote(f.column) for f in fields)}) VALUES {', '.join(values)} "
        "RETURNING id, sequence, available_at"
    )
    if len(_shapes) >= 256:  # bounded, whatever sizes callers publish in
        _shapes.clear()
    shape = _shapes[key] = (sql, tuple(bound))
    return shape


def _insert_numbered(rows: list[OutboxMessage], *, due_now: list[bool], connection) -> None:
    """Number the rows in their stream and insert them in one statement: one round trip for a handler's events on
    one stream, the stream's row lock still ordering concurrent publishers."""
    sql, params = numbered_insert(rows, connection=connection, due_now=due_now)
    connection.ensure_connection()
    # A server-side-binding cursor of psycopg's own, prepared: Django's client-side binding
    # would quote every value into the text of the statement and parse it anew each time. Its
    # errors are Django's, as the ORM's are (a lost connection an OperationalError the API answers
    # with 503, a refused value a DataError dispatch sets aside as unprocessable).
    # A failure marks the transaction for rollback, as the ORM's save() does (a DataError caught by
    # the caller must not let it commit what PostgreSQL has aborted).
    with (
        transaction.mark_for_rollback_on_error(connection.alias),
        connection.wrap_database_errors,
        psycopg.Cursor(connection.connection) as cursor,
    ):
        _with_execute_wrappers(connection, cursor, sql, params)
        inserted = sorted(cursor.fetchall(), key=lambda returned: returned[1])  # by sequence: the rows' order
    for row, (row_id, sequence, available_at) in zip(rows, inserted, strict=True):
        row.id, row.sequence, row.available_at = row_id, sequence, available_at
        row._state.adding, row._state.db = False, connection.alias


def _with_execute_wrappers(connection, cursor, sql: str, params: list) -> None:
    """Run the insert through the connection's execute wrappers, as Django runs its own cursor's
    statements (a pooler's role per transaction is one), and logged as Django's are when it logs
    (DEBUG, a test counting statements)."""

    def execute(sql, params, many, context):
        if connection.queries_logged:
            with CursorDebugWrapper(cursor, connection).debug_sql(sql, params):
                return cursor.execute(sql, params, prepare=True)
        return cursor.execute(sql, params, prepare=True)

    if not connection.execute_wrappers:
        execute(sql, params, False, None)
        return
    context = {"connection": connection, "cursor": cursor}
    for wrapper in reversed(connection.execute_wrappers):
        execute = partial(wrapper, execute)
    execute(sql, params, False, context)


_NUMBER_IN_STREAM = (
    "INSERT INTO {table} (name, last_sequence) VALUES (%s, {count}) "
    "ON CONFLICT (name) DO UPDATE SET last_sequence = {table}.last_sequence + {count} RETURNING last_sequence, name"
)


def _next_sequence(stream: str, *, using: str) -> int:
    """Hand out the stream's next number in one round trip; the row lock orders concurrent publishers."""
    table = connections[using].ops.quote_name(Stream._meta.db_table)
    with connections[using].cursor() as cursor:
        cursor.execute(_NUMBER_IN_STREAM.format(table=table, count=1), [stream])
        return cursor.fetchone()[0]


def _nudge_the_relay_on_commit(using: str) -> None:
    """Once per transaction: wake a sleeping relay when it commits (see outbox.core.wake_up)."""
    pending = connections[using].run_on_commit
    if not any(entry[1] is wake_up.nudge for entry in pending):  # (savepoints, callback, robust)
        transaction.on_commit(wake_up.nudge, using=using)


def handling_a_message() -> bool:
    """Whether this code runs inside a handler (dispatch's `handling`)."""
    return _handling.get() is not None


@contextmanager
def handling(envelope: Envelope) -> Iterator[None]:
    """Mark `envelope` as the cause of whatever is published inside the block."""
    token = _handling.set(envelope)
    try:
        yield
    finally:
        _handling.reset(token)
