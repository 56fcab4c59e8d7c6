"""`save_fields()` and `insert_row()`: `save(update_fields=...)` and `save(force_insert=True)` with
their statements written once per (model, fields), from the model's metadata: the ORM compiled the
same statement for every message, at about three times the CPU of sending it.

Each runs every field's `pre_save()` (so `auto_now` and `auto_now_add` move as with `save()`) and
`get_db_prep_save()`, and, like `save()`, a failure marks the caller's transaction for rollback.
Left out on purpose: the `pre_save`/`post_save` signals and a model's own `save()` (refused). A
value that is an expression, or a key the database chooses, goes through `save()` as before.
"""

from collections.abc import Iterable

from django.db import DatabaseError, connections, models, router, transaction

_statements: dict[tuple[type[models.Model], tuple[str, ...], str], tuple[str, tuple[models.Field, ...]]] = {}
_inserts: dict[tuple[type[models.Model], str], tuple[str, tuple[models.Field, ...]]] = {}


def save_fields(instance: models.Model, fields: Iterable[str], *, using: str | None = None) -> None:
    """Write `fields` (names or attnames, as `update_fields` takes them) of a saved instance."""
    model = type(instance)
    if model.save is not models.Model.save:
        raise TypeError(f"save_fields({model.__name__}): the model overrides save(), which this would skip")
    using = using or instance._state.db or router.db_for_write(model)
    connection = connections[using]
    names = tuple(fields)
    statement = _statements.get((model, names, connection.vendor)) or _statement_for(model, names, connection)
    sql, to_write = statement
    values = [field.pre_save(instance, False) for field in to_write]
    if any(hasattr(value, "resolve_expression") for value in values):
        instance.save(update_fields=names, using=using)
        return
    parameters = [field.get_db_prep_save(value, connection) for field, value in zip(to_write, values, strict=True)]
    parameters.append(model._meta.pk.get_db_prep_value(instance.pk, connection))
    # As save() does, a failure marks the transaction for rollback: a caller that catches it cannot
    # go on to commit what PostgreSQL has aborted (dispatch refuses that as WorkRolledBack).
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(sql, parameters)
        if cursor.rowcount == 0:  # as save(update_fields=...) says it
            raise DatabaseError("Save with update_fields did not affect any rows.")
    instance._state.adding, instance._state.db = False, using


def _statement_for(model: type[models.Model], names: tuple[str, ...], connection) -> tuple[str, tuple]:
    wanted = set(names)
    to_write = tuple(
        field
        for field in model._meta.local_concrete_fields
        if not field.primary_key and (field.name in wanted or field.attname in wanted)
    )
    known = {field.name for field in to_write} | {field.attname for field in to_write}
    if unknown := wanted - known:
        raise ValueError(f"save_fields({model.__name__}): no field {', '.join(sorted(unknown))} to save")
    if model._meta.parents or any(hasattr(field, "get_placeholder") for field in to_write):
        raise TypeError(f"save_fields({model.__name__}): use save(update_fields=...) for this model")
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in to_write)
    sql = f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {quote(model._meta.pk.column)} = %s"
    _statements[(model, names, connection.vendor)] = (sql, to_write)
    return sql, to_write


def insert_row(instance: models.Model, *, using: str | None = None) -> None:
    """Insert a new instance, as `instance.save(force_insert=True)` does (a row with its key
    already there is an IntegrityError, never an UPDATE)."""
    model = type(instance)
    if model.save is not models.Model.save:
        raise TypeError(f"insert_row({model.__name__}): the model overrides save(), which this would skip")
    using = using or router.db_for_write(model)
    connection = connections[using]
    meta = model._meta
    if instance.pk is None:
        instance.pk = meta.pk.get_pk_value_on_save(instance)  # type: ignore[attr-defined]  # a default (uuid4), as save() takes it
    statement = _inserts.get((model, connection.vendor)) or _insert_for(model, connection)
    sql, to_write = statement
    instance._prepare_related_fields_for_save(operation_name="save")  # type: ignore[attr-defined]  # save()'s own check
    values = [field.pre_save(instance, True) for field in to_write]
    if instance.pk is None or any(hasattr(value, "resolve_expression") for value in values):
        instance.save(force_insert=True, using=using)  # the database chooses a value: save() reads it back
        return
    parameters = [field.get_db_prep_save(value, connection) for field, value in zip(to_write, values, strict=True)]
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:  # as save() does
        cursor.execute(sql, parameters)
    instance._state.adding, instance._state.db = False, using


def _insert_for(model: type[models.Model], connection) -> tuple[str, tuple]:
    to_write = tuple(field for field in model._meta.local_concrete_fields if not field.generated)
    special = model._meta.parents or model._meta.order_with_respect_to
    if special or any(hasattr(field, "get_placeholder") for field in to_write):
        raise TypeError(f"insert_row({model.__name__}): use save(force_insert=True) for this model")
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in to_write)
    placeholders = ", ".join("%s" for _ in to_write)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({placeholders})"
    _inserts[(model, connection.vendor)] = (sql, to_write)
    return sql, to_write
