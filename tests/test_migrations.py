import pytest
from django.core.management import call_command


def test_every_model_change_has_its_migration(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # exits non-zero when one is missing


def test_customers_keep_their_tokens_across_the_move_to_a_token_table(transactional_db):
    """deliveries 0005: each customer's single token becomes its first CustomerToken, still working."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("deliveries", "0004_operator_permissions")], [("deliveries", "0005_customer_tokens")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old_apps = executor.loader.project_state(before).apps
    old_apps.get_model("deliveries", "Customer").objects.create(name="alice", token_hash="a" * 64)

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    token = executor.loader.project_state(after).apps.get_model("deliveries", "CustomerToken").objects.get()

    assert (token.customer.name, token.token_hash) == ("alice", "a" * 64)
    assert (token.revoked_at, token.expires_at) == (None, None)

    executor = MigrationExecutor(connection)
    executor.migrate(before)  # and back: the customer keeps its token
    customer = executor.loader.project_state(before).apps.get_model("deliveries", "Customer").objects.get()
    assert customer.token_hash == "a" * 64
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_open_letters_of_a_refused_payload_are_grouped_again_by_their_errors_not_their_values(transactional_db):
    """outbox 0015: letters written while a refused value split its cause into a group per value
    share one fingerprint; a letter no longer open keeps the one it was closed with."""
    import pydantic
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from outbox_tests.letters import a_dead_letter
    from outbox_tests.probe.handlers import Pinged

    from outbox.core.fingerprints import error_fingerprint
    from outbox.models import DeadLetter

    before, after = (
        [("outbox", "0014_stream_never_goes_back_and_locks")],
        [("outbox", "0015_validation_letters_grouped_by_cause")],
    )
    MigrationExecutor(connection).migrate(before)
    errors = []
    for value in ("abc", "xyz", "pqr"):
        try:
            Pinged.model_validate({"n": value})
        except pydantic.ValidationError as error:
            errors.append(str(error))
    letters = [
        a_dead_letter(exception_type="pydantic_core._pydantic_core.ValidationError", error=error, fingerprint=f"old{n}")
        for n, error in enumerate(errors)
    ]
    DeadLetter.objects.filter(pk=letters[2].pk).update(status="discarded")

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    fingerprints = list(DeadLetter.objects.order_by("pk").values_list("fingerprint", flat=True))
    grouped = error_fingerprint("pydantic_core._pydantic_core.ValidationError", errors[0])
    assert fingerprints == [grouped, grouped, "old2"]


def test_a_kept_first_answer_is_answered_the_same_once_migrated(
    transactional_db,
):
    """deliveries 0011: the kept 202 body becomes what was accepted, from which a repeat's answer
    is rendered again: the same answer, however the delivery changed since."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from deliveries.api import _accepted
    from deliveries.models import Delivery
    from deliveries.schemas import DeliveryAccepted
    from deliveries.services import as_accepted
    from tests.factories import Customer, delivery_request

    first = Customer("alice").request(delivery_request(), **{"Idempotency-Key": "k1"}).json()
    before, after = [("deliveries", "0010_confirmation_token_hashed")], [("deliveries", "0011_delivery_accepted_as")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)  # the snapshot made the kept answer again
    old = executor.loader.project_state(before).apps.get_model("deliveries", "Delivery")
    assert old.objects.get(pk=first["deliveryId"]).first_answer == first
    old.objects.filter(pk=first["deliveryId"]).update(pickup_time="2030-01-01T00:00:00Z")  # changed since

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    delivery = Delivery.objects.get(pk=first["deliveryId"])
    again = DeliveryAccepted.model_validate(_accepted(as_accepted(delivery))).model_dump(mode="json", by_alias=True)
    assert DeliveryAccepted.model_validate(again) == DeliveryAccepted.model_validate(first)


@pytest.mark.integration
@pytest.mark.postgres
@pytest.mark.parametrize(
    "model, field", [("deliveries.Delivery", "status_changes"), ("webhooks.Endpoint", "alert_email")]
)
def test_a_column_the_release_before_does_not_write_has_a_database_default(db, model, field):
    """The upgrade migrates before it restarts the web hosts: until then the old code inserts rows
    without the new column, which a NOT NULL column without a database default refuses (a 500)."""
    from django.apps import apps
    from django.db import connection

    table = apps.get_model(model)._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT is_nullable, column_default FROM information_schema.columns WHERE table_name = %s "
            "AND column_name = %s",
            [table, field],
        )
        [(nullable, default)] = cursor.fetchall()
    assert nullable == "YES" or default is not None, f"{table}.{field} is NOT NULL with no default"
