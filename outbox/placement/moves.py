"""Move a context, with its data, onto the database the settings now put it on (`move_context`).

What moves: its tables' rows (their keys kept) and the kernel's rows that are its (the events it
published, its subscribers' inbox rows, cursors and letters); every stream's number is carried at
the higher of the two, so that no ordered subscriber finds its next events stale. Three steps,
each safe to run again, the old database's tables held against writers throughout: copy (one
transaction on the new database; a row already there is left as it is), check (every row is there,
the context's own field by field, a NULL matching a NULL, JSON as it reads), and delete from the
old database. Stop the processes first: the guide's `move_context` has the whole procedure.
"""

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.apps import apps
from django.core.management.color import no_style
from django.db import OperationalError, connections, models, transaction

from outbox.core.subscriptions import context_of, subscribers
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, Stream, StreamCursor
from outbox.placement.databases import database_of
from outbox.placement.rows import published_as


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
    target = target or database_of(label)
    if target == source:
        raise CannotMove(f"{label!r} would move from {source!r} to {source!r}: set OUTBOX_CONTEXT_DATABASES first")
    own = _own_models(label)
    theirs = [s for s in subscribers() if context_of(s) == label]
    kernel: list[tuple[type[models.Model], models.Q, tuple[str, ...]]] = [
        (OutboxMessage, models.Q(source=published_as(label)), ("message_id", "target_subscriber")),
        (InboxMessage, models.Q(subscriber__in=theirs), ("subscriber", "message_id")),
        (StreamCursor, models.Q(subscriber__in=theirs), ("subscriber", "stream")),
        # An unreadable message's letter has no message id: when it first failed tells it from another.
        (DeadLetter, models.Q(subscriber__in=theirs), ("subscriber", "message_id", "first_failed_at")),
    ]
    tables: list[type[models.Model]] = [*own, *(k[0] for k in kernel), Stream]
    moved = {model._meta.db_table: Moved(model._meta.db_table) for model in tables}

    def done(model) -> None:
        if on_table is not None:
            on_table(moved[model._meta.db_table])

    def copy(model, where: models.Q, key: tuple[str, ...], *, keep_keys: bool) -> None:
        moved[model._meta.db_table].copied = _copy(model, where, key, source, target, batch_size, keep_keys=keep_keys)
        done(model)

    # The old database's tables are held against writers (readers go on) from the first row read
    # to the last deleted: what was copied and checked is what is deleted, nothing written between.
    # The copy and its check are one transaction on the new database: a failed check undoes the copy.
    with transaction.atomic(using=source):
        _hold(source, tables)
        with transaction.atomic(using=target):
            _hold(target, tables)  # nor on the new one: a row written there meanwhile could take a copied key
            for model in own:
                copy(model, models.Q(), _primary_key(model), keep_keys=True)
            for model, where, key in kernel:
                copy(model, where, key, keep_keys=False)
            moved[Stream._meta.db_table].copied = _carry_streams(source, target, batch_size)
            done(Stream)
            _restart_sequences(own, target)
            for model in own:  # every field: a row of that key written there otherwise is not this one
                _check(model, models.Q(), _primary_key(model), _fields(model), source, target, batch_size)
            for model, where, key in kernel:
                _check(model, where, key, (), source, target, batch_size)
        # Committed on the new database; should the old one's commit fail, a second run finds every
        # row there already and deletes them.
        for model, where, _ in kernel:
            moved[model._meta.db_table].deleted = model._default_manager.using(source).filter(where)._raw_delete(source)
        for model in reversed(own):
            moved[model._meta.db_table].deleted = model._default_manager.using(source).all()._raw_delete(source)
    return list(moved.values())


def _primary_key(model) -> tuple[str, ...]:
    return (model._meta.pk.attname,)


def _fields(model) -> tuple[str, ...]:
    """Every field but the primary key."""
    return tuple(field.attname for field in model._meta.concrete_fields if not field.primary_key)


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


def _copy(
    model, where: models.Q, key: tuple[str, ...], source: str, target: str, batch_size: int, *, keep_keys: bool
) -> int:
    """Rows of `source` onto `target`, in key order (the kernel's ids, new on the target, keep the order they had: an
    outbox's id order is its causal order); one there already, by `key`, is left as it is. Returns how many were
    copied."""
    copied = 0
    with _times_as_they_were(model):
        for batch in _rows(model, where, source, batch_size):
            # Looked for, not left to a conflict: a key with a NULL conflicts with nothing, and a second run would
            # copy a letter of no message id again.
            missing = _not_there(model, batch, key, (), target)
            if not keep_keys:
                for row in missing:
                    row.pk = None
            # A row that takes another's unique value (a name, a stream's number) is not
            # copied either: the check finds it missing.
            model.objects.using(target).bulk_create(missing, ignore_conflicts=True)
            copied += len(missing)
    return copied


@contextmanager
def _times_as_they_were(model) -> Iterator[None]:
    """For the copy, the rows keep their `auto_now` and `auto_now_add` times (when processed, created, last changed),
    which retention and the console read: bulk_create would stamp the time of the copy, as save() does. This
    process's fields only: the command's."""
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


def _check(
    model,
    where: models.Q,
    key: tuple[str, ...],
    compared: tuple[str, ...],
    source: str,
    target: str,
    batch_size: int,
) -> None:
    """Every row of `source` is on `target`, by `key` (its fields), with its `compared` fields the
    same: else nothing is deleted."""
    for batch in _rows(model, where, source, batch_size):
        missing = _not_there(model, batch, key, compared, target)
        if missing:
            one = ", ".join(f"{name}={getattr(missing[0], name)}" for name in key)
            raise CannotMove(
                f"{len(missing)} rows of {model._meta.db_table} are not on the new database, or not as they "
                f"are on the old (one: {one}): nothing was deleted"
            )


def _not_there(model, rows: list, key: tuple[str, ...], compared: tuple[str, ...], target: str) -> list:
    """Those of `rows` `target` has no row of by `key`, a NULL matching a NULL, or has one of whose
    `compared` fields differ. The target's rows read are those of the batch's values only, each
    key field's among the batch's (NULL among them if one is), not all of a subscriber's."""
    among = models.Q()
    for name in key:
        values = {getattr(row, name) for row in rows}
        matching = models.Q(**{f"{name}__in": values - {None}})
        if None in values:
            matching |= models.Q(**{f"{name}__isnull": True})
        among &= matching
    there = {
        found[: len(key)]: found[len(key) :]
        for found in model.objects.using(target).filter(among).values_list(*key, *compared)
    }
    # Compared by equality, never hashed: a field may hold JSON (a dict, a list).
    return [row for row in rows if there.get(_values(row, key)) != _values(row, compared)]


def _values(row, names: tuple[str, ...]) -> tuple:
    return tuple(getattr(row, name) for name in names)
