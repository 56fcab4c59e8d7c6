"""`locked_row()`: the row a service changes, read by its key and locked until its transaction ends.

A handler's service typically starts by locking the one row it is about. Built with the ORM
(`Model.objects.select_for_update().filter(pk=key).first()`), Django builds and compiles the
same statement for every message, which took a worker about twice the CPU of the read itself.
Here the statement, and the converters that turn each column into the field's Python value
(the ones the ORM's compiler would apply), are worked out once per model from its own metadata;
a read is one execute, one fetch and `Model.from_db()`, the constructor the ORM's own reads use.
(`raw()` did the same work, but resolved the columns against the model again on every call: a
third of a read's CPU.)
"""

from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections, models, router, transaction
from django.db.transaction import TransactionManagementError

M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True)
class _Shape:
    sql: str
    attnames: tuple[str, ...]
    converters: tuple[tuple[int, tuple, Any], ...]  # (column index, converters, the column's expression)


_shapes: dict[tuple[type[models.Model], str], _Shape] = {}


def locked_row(model: type[M], key, *, using: str | None = None) -> M | None:
    """The row of `model` whose primary key is `key`, locked until the transaction ends (where
    the database locks rows: not SQLite, whose writers are serialised); None if there is none.
    The row as its table has it: a default manager's filters, if the model has any, do not apply."""
    if model._meta.parents:  # its parent's row and fields are another table's, which this does not read
        raise TypeError(f"locked_row({model.__name__}): a model with multi-table inheritance is not supported")
    using = using or router.db_for_write(model)
    connection = connections[using]
    if not connection.in_atomic_block:  # as select_for_update() refuses: the lock would end at once
        raise TransactionManagementError(f"locked_row({model.__name__}) must run inside transaction.atomic()")
    shape = _shapes.get((model, connection.vendor)) or _shape_of(model, connection)
    # A lock not had (a lock timeout, a deadlock) aborts the transaction: marked, as save() marks it.
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(shape.sql, [model._meta.pk.get_db_prep_value(key, connection)])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for index, converters, expression in shape.converters:
        for convert in converters:
            values[index] = convert(values[index], expression, connection)
    return model.from_db(using, shape.attnames, values)


def _shape_of(model: type[models.Model], connection) -> _Shape:
    """The statement and the converters, as the ORM's compiler works them out for a SELECT of every column."""
    quote, fields = connection.ops.quote_name, model._meta.concrete_fields
    table = quote(model._meta.db_table)
    columns = ", ".join(f"{table}.{quote(field.column)}" for field in fields)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    converters = []
    for index, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if found:
            converters.append((index, tuple(found), column))
    shape = _Shape(
        sql=f"SELECT {columns} FROM {table} WHERE {table}.{quote(model._meta.pk.column)} = %s{lock}",
        attnames=tuple(field.attname for field in fields),
        converters=tuple(converters),
    )
    _shapes[(model, connection.vendor)] = shape
    return shape
