"""Move a context, with its data, onto the database the settings now put it on (`move_context`).

What moves with it: its tables' rows (their keys kept), and the kernel's rows that are its: the
events it published (relayed or not, timers still to come, copies the sweep sends again), its
subscribers' inbox rows, stream cursors and dead letters. Every stream's numbering is carried over
too, at the higher of the two numbers, so that its next event is numbered after the last its
subscribers saw (a stream numbered from 1 again would have each of its events dropped as stale by
an ordered subscriber). What another context published to it stays where it was, and that
database's relay sends it on: the context's handlers now run on the new database, where its inbox is.

Three steps, each safe to run again: copy (one transaction on the new database, all of it or
nothing, with the check: a row already there, by its key, is left as it is), check (every row of
the old database is on the new), delete from the old database; the old database's tables held
against writers throughout. Stop the processes first (web, workers, relays): a writer caught in the
middle of a write makes it stop, not wait. docs/deployment.md has the whole procedure.
"""

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.apps import apps
from django.core.management.color import no_style
from django.db import OperationalError, connections, models, transaction

from outbox.core.context_databases import of
from outbox.core.context_rows import published_as
from outbox.core.subscriptions import context_of, subscribers
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, Stream, StreamCursor


class CannotMove(Exception):
    """Why the move stops: said before anything is written, or after the copy and before the delete."""


@dataclass
class Moved:
    table: str
    copied: int = 0
    deleted: int = 0


def move_context(
    *,
    label: str,
    source: str = "default",
    target: str | None = None,
    batch_size: int = 2000,
    on_table: Callable[[Moved], None] | None = None,
) -> list[Moved]:
    """Copy `label`'s rows and its kernel rows from `source` onto `target` (its database, as the
    settings say), check, then delete them from `source`. Returns what each table moved."""
    target = target or of(label)
    if target == source:
        raise CannotMove(f"{label!r} would move from {source!r} to {source!r}: set OUTBOX_CONTEXT_DATABASES first")
    own = _own_models(label)
    theirs = [s for s in subscribers() if context_of(s) == label]
    kernel = [
        (OutboxMessage, models.Q(source=published_as(label)), ("message_id", "target_subscriber")),
        (InboxMessage, models.Q(subscriber__in=theirs), ("subscriber", "message_id")),
        (StreamCursor, models.Q(subscriber__in=theirs), ("subscriber", "stream")),
        (DeadLetter, models.Q(subscriber__in=theirs), ("subscriber", "message_id")),
    ]
    moved = {model._meta.db_table: Moved(model._meta.db_table) for model in [*own, *(k[0] for k in kernel), Stream]}

    def done(model) -> None:
        if on_table is not None:
            on_table(moved[model._meta.db_table])

    def copy(model, where: models.Q, *, keep_keys: bool) -> None:
        moved[model._meta.db_table].copied = _copy(model, where, source, target, batch_size, keep_keys=keep_keys)
        done(model)

    # The old database's tables are held against writers (readers go on) from the first row read
    # to the last deleted: what was copied and checked is what is deleted, nothing written between.
    # The copy and its check are one transaction on the new database: a failed check undoes the copy.
    tables = [*own, *(k[0] for k in kernel), Stream]
    with transaction.atomic(using=source):
        _hold(source, tables)
        with transaction.atomic(using=target):
            _hold(target, tables)  # nor on the new one: a row written there meanwhile could take a copied key
            for model in own:
                copy(model, models.Q(), keep_keys=True)
            for model, where, _ in kernel:
                copy(model, where, keep_keys=False)
            moved[Stream._meta.db_table].copied = _carry_streams(source, target, batch_size)
            done(Stream)
            _restart_sequences(own, target)
            for model in own:  # every field: a row of that key written there otherwise is not this one
                _check(model, models.Q(), _fields(model), source, target, batch_size)
            for model, where, key in kernel:
                _check(model, where, key, source, target, batch_size)
        # Committed on the new database; should the old one's commit fail, a second run finds every
        # row there already and deletes them.
        for model, where, _ in kernel:
            moved[model._meta.db_table].deleted = model.objects.using(source).filter(where)._raw_delete(source)
        for model in reversed(own):
            moved[model._meta.db_table].deleted = model.objects.using(source).all()._raw_delete(source)
    return list(moved.values())


def _fields(model) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


def _hold(source: str, tables: list) -> None:
    """EXCLUSIVE: nobody writes to them until the move commits. Waited for a few seconds at most:
    a process in the middle of a write (a worker, a relay) is told of, not waited out. A process
    merely connected would write after the move, to the old database: stop them all first."""
    connection = connections[source]
    if connection.vendor != "postgresql":
        return  # SQLite: the move's write transaction holds the whole database already
    quote = connection.ops.quote_name
    names = ", ".join(quote(model._meta.db_table) for model in tables)
    try:
        with transaction.atomic(using=source), connection.cursor() as cursor:  # a savepoint: the error stays here
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            cursor.execute(f"LOCK TABLE {names} IN EXCLUSIVE MODE")
    except OperationalError as error:
        raise CannotMove(
            f"something is still writing to {source} ({error}): stop web, workers and relays first"
        ) from error


def _own_models(label: str) -> list[type[models.Model]]:
    found = [
        model
        for model in apps.get_app_config(label).get_models(include_auto_created=True)
        if model._meta.managed and not model._meta.proxy
    ]
    if not found:
        raise CannotMove(f"{label!r} has no tables to move")
    return found


def _rows(model, where: models.Q, database: str, batch_size: int) -> Iterable[list]:
    rows = model.objects.using(database).filter(where).order_by("pk")
    batch = []
    for row in rows.iterator(chunk_size=batch_size):
        batch.append(row)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _copy(model, where: models.Q, source: str, target: str, batch_size: int, *, keep_keys: bool) -> int:
    """Rows of `source` onto `target`, in key order (the kernel's ids, new on the target, keep the
    order they had: an outbox's id order is its causal order); one there already is left as it is."""
    copied = 0
    with _times_as_they_were(model):
        for batch in _rows(model, where, source, batch_size):
            if not keep_keys:
                for row in batch:
                    row.pk = None
            model.objects.using(target).bulk_create(batch, ignore_conflicts=True)
            copied += len(batch)
    return copied


@contextmanager
def _times_as_they_were(model) -> Iterator[None]:
    """bulk_create stamps `auto_now` and `auto_now_add` fields with the time of the copy, as save()
    does (loaddata's raw save does not, but saves a row at a time): for the copy, the rows keep
    theirs (when they were processed, created, last changed: retention and the console read them).
    This process's fields only: the command's."""
    stamped = [
        f for f in model._meta.concrete_fields if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
    ]
    before = [(f.auto_now, f.auto_now_add) for f in stamped]
    for f in stamped:
        f.auto_now = f.auto_now_add = False
    try:
        yield
    finally:
        for f, (now, now_add) in zip(stamped, before, strict=True):
            f.auto_now, f.auto_now_add = now, now_add


def _carry_streams(source: str, target: str, batch_size: int) -> int:
    """Every stream's last number onto the target, where it is higher there is kept."""
    carried = 0
    for batch in _rows(Stream, models.Q(), source, batch_size):
        there = dict(
            Stream.objects.using(target).filter(name__in=[s.name for s in batch]).values_list("name", "last_sequence")
        )
        Stream.objects.using(target).bulk_create(
            [Stream(name=s.name, last_sequence=s.last_sequence) for s in batch if s.name not in there]
        )
        for stream in batch:
            if stream.name in there and there[stream.name] < stream.last_sequence:
                Stream.objects.using(target).filter(name=stream.name).update(last_sequence=stream.last_sequence)
        carried += len(batch)
    return carried


def _restart_sequences(own: list, target: str) -> None:
    """A table whose keys the database numbers (an AutoField) goes on after the highest copied."""
    connection = connections[target]
    statements = connection.ops.sequence_reset_sql(no_style(), own)
    if statements:
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)


def _check(model, where: models.Q, key: tuple[str, ...], source: str, target: str, batch_size: int) -> None:
    """Every row of `source` is on `target`, by `key` (its fields): else nothing is deleted."""
    for batch in _rows(model, where, source, batch_size):
        wanted = {tuple(getattr(row, name) for name in key) for row in batch}
        # Each field of the key among the batch's values: the target's rows of this batch, not all of a subscriber's.
        among = {f"{name}__in": {k[i] for k in wanted} for i, name in enumerate(key[:2])}
        there = set(model.objects.using(target).filter(**among).values_list(*key))
        missing = wanted - there
        if missing:
            raise CannotMove(
                f"{len(missing)} rows of {model._meta.db_table} are not on the new database "
                f"(one: {sorted(missing)[0]}): nothing was deleted"
            )
