"""`locked_row()`: the row a service changes, read by its key and locked until its transaction ends.

A handler's service typically starts by locking the one row it is about. Built with the ORM
(`Model.objects.select_for_update().filter(pk=key).first()`), Django builds and compiles the
same statement for every message, which took a worker about twice the CPU of the read itself:
here the statement is written once from the model's own metadata and run with `raw()`, so the
row comes back as the model's instance, every field converted as the ORM converts it.
"""

from typing import TypeVar

from django.db import connections, models
from django.db.transaction import TransactionManagementError

M = TypeVar("M", bound=models.Model)


def locked_row(model: type[M], key, *, using: str = "default") -> M | None:
    """The row of `model` whose primary key is `key`, locked until the transaction ends (where
    the database locks rows: not SQLite, whose writers are serialised); None if there is none.
    The row as its table has it: a default manager's filters, if the model has any, do not apply."""
    if model._meta.parents:  # its parent's row and fields are another table's, which this does not read
        raise TypeError(f"locked_row({model.__name__}): a model with multi-table inheritance is not supported")
    connection = connections[using]
    if not connection.in_atomic_block:  # as select_for_update() refuses: the lock would end at once
        raise TransactionManagementError(f"locked_row({model.__name__}) must run inside transaction.atomic()")
    quote, pk = connection.ops.quote_name, model._meta.pk
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    sql = f"SELECT * FROM {quote(model._meta.db_table)} WHERE {quote(pk.column)} = %s{lock}"
    return next(iter(model._default_manager.db_manager(using).raw(sql, [pk.get_db_prep_value(key, connection)])), None)
