"""Each context owns its data, and PostgreSQL enforces it (outbox.placement).

On PostgreSQL each context's tables are in a schema of its own and the kernel's in `outbox`; a
handler runs under its context's role, an API request under the deliveries context's, and a query
from one context's code into another context's table is refused by PostgreSQL itself. The admin
and the commands run as the project's own role. SQLite, the embedded default, is unchanged."""

import os
from uuid import uuid4

import pytest
from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.db import DatabaseError, ProgrammingError, connection, connections, transaction
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from outbox_tests.letters import envelope
from outbox_tests.probe import handlers as probe
from outbox_tests.probe.models import Effect

from deliveries.events import DeliveryCompleted
from drones.events import DroneGrounded
from drones.models import Drone
from outbox.core.dead_letters import record_dead_letter
from outbox.core.publishing import outbox_row, publish
from outbox.core.subscriptions import message_to, pack_of, subscribers, subscribers_of
from outbox.models import DeadLetter, Heartbeat, InboxMessage, Lock, OutboxMessage, Stream, StreamCursor
from outbox.placement import roles
from outbox.placement.grants import own_schemas
from outbox.placement.grants import tables_of as tables_of_app
from outbox.placement.roles import role_of, search_path
from outbox.placement.rows import own_rows
from outbox.relaying.sweep import _TAKE_THE_SWEEP, _only_sweeper
from outbox.testing import deliver, hand_over, pending, run_choreography
from tests.factories import Customer, requested
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

CONTEXTS = ["packages", "drones", "deliveries", "notifications", "webhooks"]


def schemas_of_tables() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename, schemaname FROM pg_tables WHERE schemaname NOT LIKE 'pg_%'")
        return dict(cursor.fetchall())


def tables_of(label: str) -> list[str]:
    return tables_of_app(apps.get_app_config(label))


def test_each_contexts_tables_are_in_a_schema_of_its_own_and_the_kernels_in_outbox(db):
    if connection.vendor != "postgresql":  # the embedded default: one file, as Django names its tables
        assert not roles.enabled() and own_schemas() == []
        return
    where = schemas_of_tables()
    for label in CONTEXTS:
        assert {where[table] for table in tables_of(label)} == {label}
    assert {where[table] for table in tables_of("outbox")} == {"outbox"}
    assert where["auth_user"] == where["django_migrations"] == "public"  # Django's own stay where they were
    assert own_schemas() == []  # all in place: a later migrate finds nothing to do


@pytest.fixture
def probe_is_a_context(settings, transactional_db):
    """The probe (a test app with handlers of its own) made a context for the test: its schema and
    its role; given back to `public` afterwards, so the other tests find its tables as before."""
    settings.OUTBOX_CONTEXTS = [*settings.OUTBOX_CONTEXTS, "probe"]
    own_schemas()
    own_rows()  # its own rows of the kernel's tables (the other roles' policies are as they were)
    server_sessions_start_again()
    yield
    with connection.cursor() as cursor:
        for table in tables_of("probe"):
            cursor.execute(f'ALTER TABLE probe."{table}" SET SCHEMA public')
        cursor.execute("DROP SCHEMA probe")
    settings.OUTBOX_CONTEXTS = [label for label in settings.OUTBOX_CONTEXTS if label != "probe"]
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{connection.settings_dict["NAME"]}" SET search_path TO {search_path()}')
        cursor.execute(f"SET search_path TO {search_path()}")
    server_sessions_start_again()


def server_sessions_start_again() -> None:
    """Behind `./dev test-pgbouncer`, PgBouncer's server sessions keep the search_path they began
    with: closed (RECONNECT), the next ones begin with the database's new one. (`migrate` ends them
    itself; this fixture adds a context without it.)"""
    if port := os.environ.get("PGBOUNCER_ADMIN_PORT"):
        from harness.pgbouncer import PgBouncer

        connection.close()
        PgBouncer(port=int(port)).close_server_connections(connection.settings_dict["NAME"])


@pytest.mark.postgres
def test_a_handler_under_its_contexts_role_is_refused_another_contexts_table(probe_is_a_context, worker, broker):
    def deliver(subscriber: str, body: dict) -> None:
        broker.enqueue(message_to(subscriber, body))

    told = envelope(payload={"n": 1, "fail": {"probe_a": "tell_role"}})
    deliver("probe_a", told)
    wait_until(lambda: Effect.objects.filter(n=1).exists(), what="the probe's handler to take effect")
    assert probe.role_of[told["message_id"]] == role_of("probe") == f"{settings.OUTBOX_CONTEXT_ROLE_PREFIX}probe"

    across = envelope(payload={"n": 2, "fail": {"probe_a": "reach_across"}})
    deliver("probe_a", across)
    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_a").first(), what="its dead letter")
    assert letter.exception_type == "django.db.utils.ProgrammingError"
    assert 'relation "drones_drone" does not exist' in letter.error  # to the probe's role, no such schema
    assert not InboxMessage.objects.filter(message_id=across["message_id"]).exists()
    Drone.objects.count()  # the table is there: the operator (this test) reads it


@pytest.mark.postgres
@pytest.mark.parametrize("per_transaction", [False, True], ids=["as deployed", "per transaction"])
@pytest.mark.parametrize("packed", [False, True], ids=["alone", "in a pack"])
def test_on_commit_callbacks_keep_the_contexts_role_through_a_pooler(
    probe_is_a_context, worker, broker, settings, per_transaction, packed
):
    """On a direct connection the session keeps the context's role after the handler's transaction
    commits; through a pooler SET LOCAL ends with it, and an on_commit callback ran as the owner."""
    settings.OUTBOX_TRANSACTION_POOLER = settings.OUTBOX_TRANSACTION_POOLER or per_transaction
    told = [envelope(payload={"n": n, "fail": {"probe_a": "tell_role_on_commit"}}) for n in (1, 2)]
    copies = [message_to("probe_a", body) for body in told]
    for message in [pack_of(copies)] if packed else copies:
        broker.enqueue(message)
    wait_until(lambda: len(Effect.objects.filter(n__in=[1, 2])) == 2, what="the probe's handlers to take effect")
    wait_until(lambda: all(body["message_id"] in probe.role_on_commit_of for body in told), what="the callbacks")
    assert {probe.role_on_commit_of[body["message_id"]] for body in told} == {role_of("probe")}


@pytest.mark.postgres
@pytest.mark.parametrize("per_transaction", [False, True], ids=["as deployed", "per transaction"])
def test_an_api_request_runs_under_the_deliveries_role_and_is_refused_another_contexts_table(
    transactional_db, settings, monkeypatch, per_transaction
):
    # As deployed: per session on a direct connection, per transaction through PgBouncer (the
    # run's DATABASE_TRANSACTION_POOLER); the second forces per transaction (SET LOCAL) either way.
    pooler = settings.OUTBOX_TRANSACTION_POOLER = settings.OUTBOX_TRANSACTION_POOLER or per_transaction
    customer = Customer("roles")
    delivery_id = requested(customer)  # the whole POST, under the deliveries role
    assert OutboxMessage.objects.filter(correlation_id=delivery_id, type="delivery.requested").exists()

    from deliveries import selectors

    seen, original = [], selectors.delivery_of

    def reading_as(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            seen.append(cursor.fetchone()[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(selectors, "delivery_of", reading_as)
    with CaptureQueriesContext(connection) as statements:
        assert customer.get(f"/deliveries/{delivery_id}").status_code == 200
    assert seen == [role_of("deliveries")]
    roles = [q["sql"] for q in statements.captured_queries if "ROLE" in q["sql"] or "search_path" in q["sql"]]
    if pooler:  # nothing a session keeps (the role is SET LOCAL on psycopg's connection, below Django's log)
        assert roles == []
    else:
        assert roles == [f'SET ROLE "{role_of("deliveries")}"', "RESET ROLE"]

    def reaching_across(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM drones.drones_drone")  # named, schema and all
        return original(*args, **kwargs)

    monkeypatch.setattr(selectors, "delivery_of", reaching_across)
    client = Client(headers={"Authorization": f"Bearer {customer.token}"}, raise_request_exception=True)
    with pytest.raises(ProgrammingError, match="permission denied for schema drones"):
        client.get(f"/api/deliveries/{delivery_id}")

    # The request left its connection as it found it: this test, the operator, reads every context.
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user, session_user")
        current, session = cursor.fetchone()
    assert current == session
    Drone.objects.count()


@pytest.mark.postgres
def test_the_admin_runs_as_the_projects_own_role_and_reads_every_context(admin_client, transactional_db):
    for model in ("deliveries/delivery", "drones/drone", "packages/package", "notifications/notification"):
        assert admin_client.get(f"/admin/{model}/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user = session_user")
        assert cursor.fetchone()[0]


@pytest.mark.postgres
def test_an_existing_deployment_moves_in_with_its_rows_and_its_messages_in_flight(db):
    """Today's single schema, with deliveries at every step of the choreography and events not yet
    handed on, moved into the schemas by `migrate` (its post_migrate): every row stays, and the
    messages in flight go on to their subscribers. In the test's transaction (DDL is transactional
    in PostgreSQL), so the move is undone afterwards."""
    customer = Customer("moving")
    deliveries = [requested(customer) for _ in range(6)]
    for steps, delivery_id in enumerate(deliveries):  # the n-th delivery n events along
        for row in pending(correlation_id=delivery_id, due_only=True)[:steps]:
            hand_over(row)
    before = {label: rows_of(label) for label in [*CONTEXTS, "outbox"]}
    in_flight = {row.message_id for d in deliveries for row in pending(correlation_id=d)}
    assert in_flight

    with connection.cursor() as cursor:  # as deployments were before: every table in public
        for label in [*CONTEXTS, "outbox"]:
            schema = "outbox" if label == "outbox" else label
            for table in tables_of(label):
                cursor.execute(f'ALTER TABLE "{schema}"."{table}" SET SCHEMA public')
            cursor.execute(f'DROP SCHEMA "{schema}"')
    assert set(schemas_of_tables()[t] for t in tables_of("drones")) == {"public"}

    call_command("migrate", verbosity=0)
    assert {schemas_of_tables()[t] for t in tables_of("drones")} == {"drones"}
    assert {label: rows_of(label) for label in [*CONTEXTS, "outbox"]} == before
    assert {row.message_id for d in deliveries for row in pending(correlation_id=d)} == in_flight

    for delivery_id in deliveries:  # each handler under its context's role, in the moved tables
        run_choreography(correlation_id=delivery_id)
    assert not DeadLetter.objects.exists()
    assert not [row for d in deliveries for row in pending(correlation_id=d, due_only=True)]


def rows_of(label: str) -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in tables_of(label):
            cursor.execute(f'SELECT count(*) FROM "{table}"')
            counts[table] = cursor.fetchone()[0]
    return counts


def test_a_context_not_listed_and_the_operator_have_no_role_of_their_own():
    assert role_of(None) is None and role_of("no_such_context") is None
    assert role_of("drones") == f"{settings.OUTBOX_CONTEXT_ROLE_PREFIX}drones"


def current_user() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        return cursor.fetchone()[0]


@pytest.mark.postgres
@pytest.mark.parametrize("per_transaction", [False, True], ids=["as deployed", "per transaction"])
def test_code_that_crosses_contexts_on_purpose_acts_as_each_in_turn_and_then_as_before(
    transactional_db, settings, per_transaction
):
    """The project's wiring (notify-me) asks one context inside a request of another: inside a
    transaction too, the code after the inner block acts as the outer context again, not as the
    owner; and back outside, this test is the operator again."""
    settings.OUTBOX_TRANSACTION_POOLER = settings.OUTBOX_TRANSACTION_POOLER or per_transaction
    operator = current_user()
    with roles.acting_as("deliveries"):
        assert current_user() == role_of("deliveries")
        with transaction.atomic():
            assert current_user() == role_of("deliveries")
            with roles.acting_as("notifications"):
                assert current_user() == role_of("notifications")
            assert current_user() == role_of("deliveries")
        with roles.acting_as("notifications"):  # outside a transaction
            assert current_user() == role_of("notifications")
        assert current_user() == role_of("deliveries")
    assert current_user() == operator


@pytest.mark.postgres
def test_through_a_pooler_a_transaction_that_begins_with_publish_is_given_its_role_too(transactional_db, settings):
    """publish()'s insert runs on psycopg's own cursor, below Django's, where no execute_wrapper
    sees it: it gives the transaction its role itself, or everything after it would run as the owner."""
    settings.OUTBOX_TRANSACTION_POOLER = True
    with roles.acting_as("deliveries"), transaction.atomic():
        publish(DeliveryCompleted(delivery_id=uuid4(), drone_id=uuid4()), stream="delivery:first-statement")
        assert current_user() == role_of("deliveries")


def count(model, **where) -> int:
    return model.objects.filter(**where).count()


@pytest.mark.postgres
@pytest.mark.parametrize("per_transaction", [False, True], ids=["as deployed", "per transaction"])
def test_to_a_contexts_role_the_kernels_tables_hold_only_its_own_events_inbox_and_letters(
    transactional_db, settings, per_transaction
):
    """An outbox, an inbox and dead letters per context on a database they share (context_rows): the
    drones' events and rows are there, and to the role of deliveries they are not; an event written
    under another context's name is refused. The operator sees every context's rows."""
    settings.OUTBOX_TRANSACTION_POOLER = settings.OUTBOX_TRANSACTION_POOLER or per_transaction
    with transaction.atomic():  # as the operator: one event and one row of each context's
        publish(DroneGrounded(drone_id=uuid4()), stream="drone:rls")
        publish(DeliveryCompleted(delivery_id=uuid4(), drone_id=uuid4()), stream="delivery:rls")
    for subscriber in ("drones", "deliveries"):
        InboxMessage.objects.create(
            subscriber=subscriber, message_id=uuid4(), type="probe.pinged", correlation_id=uuid4()
        )
        record_dead_letter(subscriber=subscriber, body=envelope(), reason="handler_failed")
        StreamCursor.objects.create(subscriber=subscriber, stream="delivery:rls", last_sequence=1)
    assert count(OutboxMessage, source="drones") == count(OutboxMessage, source="deliveries") == 1
    with roles.acting_as("deliveries"), transaction.atomic():
        assert count(OutboxMessage, source="drones") == 0 and count(OutboxMessage, source="deliveries") == 1
        assert count(InboxMessage, subscriber="drones") == 0 and count(InboxMessage, subscriber="deliveries") == 1
        assert count(DeadLetter, subscriber="drones") == 0 and count(DeadLetter, subscriber="deliveries") == 1
        assert list(StreamCursor.objects.values_list("subscriber", flat=True)) == ["deliveries"]
        assert set(OutboxMessage.objects.values_list("source", flat=True)) == {"deliveries"}
    refused = pytest.raises(ProgrammingError, match="row-level security")
    with refused, roles.acting_as("deliveries"), transaction.atomic():
        publish(DroneGrounded(drone_id=uuid4()), stream="drone:not-its-own")
    assert count(OutboxMessage, source="drones") == 1  # the operator's view: every context's


def test_a_listed_context_that_is_no_app_and_handlers_outside_every_context_are_said_at_start(settings):
    from outbox.placement.roles import contexts_are_apps_and_own_their_handlers

    said = contexts_are_apps_and_own_their_handlers()  # the tests' probe has handlers and is no context
    assert {w.id for w in said} == {"outbox.W003"} and all("'probe'" in w.msg for w in said)
    assert all("run as the project's own role" in w.msg for w in said)

    settings.OUTBOX_CONTEXTS = [*settings.OUTBOX_CONTEXTS, "probe", "no_such_app"]
    found = contexts_are_apps_and_own_their_handlers()
    assert [f.id for f in found] == ["outbox.E003"] and "'no_such_app'" in found[0].msg

    settings.OUTBOX_CONTEXTS = []  # one schema, one role: nothing to say
    assert contexts_are_apps_and_own_their_handlers() == []


def _as_role(context: str, sql: str, params=()) -> str | None:
    """Run `sql` as `context`'s role in a transaction of its own: None if PostgreSQL let it, else its refusal."""
    try:
        with roles.acting_as(context), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
    except DatabaseError as error:
        return str(error).splitlines()[0]
    return None


@pytest.mark.postgres
def test_a_contexts_role_reaches_no_further_than_its_rows_of_the_kernels_tables(
    transactional_db,
):
    """Under its own role (a handler, the API) a context could rewind or delete another's stream
    counter, setval() the outbox's shared id sequence, age or delete the heartbeats move_context
    trusts, or hold the sweep back: each is refused, and what the role is for still works."""
    with transaction.atomic():
        publish(DeliveryCompleted(delivery_id=uuid4(), drone_id=uuid4()), stream="delivery:counted")
    now = timezone.now()
    Heartbeat.objects.create(process="worker@elsewhere:7", kind="worker", started_at=now, last_seen=now)
    lock = f'"{Lock._meta.db_table}"'
    attempts = {
        "a stream rewound": "UPDATE outbox_stream SET last_sequence = 0 WHERE name = 'delivery:counted'",
        "a stream renamed": "UPDATE outbox_stream SET name = 'drone:taken' WHERE name = 'delivery:counted'",
        "a stream deleted": "DELETE FROM outbox_stream WHERE name = 'delivery:counted'",
        "the outbox's ids set back": "SELECT setval(pg_get_serial_sequence('outbox_outboxmessage', 'id'), 1)",
        "a heartbeat aged": "UPDATE outbox_heartbeat SET last_seen = now() - interval '1 day'",
        "a heartbeat deleted": "DELETE FROM outbox_heartbeat",
        "the sweep's lock held": f"SELECT FROM {lock} WHERE name = 'sweep' FOR UPDATE",
        "a lock made": f"INSERT INTO {lock} (name) VALUES ('a context')",
    }
    refused = {what: _as_role("drones", sql) for what, sql in attempts.items()}
    assert [what for what, refusal in refused.items() if refusal is None] == [], refused
    assert "never goes back" in refused["a stream rewound"]
    assert all("permission denied" in refusal for what, refusal in refused.items() if "a stream re" not in what)
    assert (Stream.objects.get(name="delivery:counted").last_sequence, Heartbeat.objects.count()) == (1, 1)

    with roles.acting_as("drones"), transaction.atomic():  # what the role is for
        publish(DroneGrounded(drone_id=uuid4()), stream="delivery:counted")  # numbered on, in another's stream too
    assert Stream.objects.get(name="delivery:counted").last_sequence == 2


@pytest.mark.postgres
def test_the_sweep_is_held_back_by_no_advisory_lock_a_context_could_take(transactional_db):
    """An advisory lock is anyone's to take: the sweep's lock is a row no context's role may lock."""
    Lock.objects.get_or_create(name="sweep")  # as migrate leaves it (the test database is emptied between tests)
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:  # a context's code, holding what the sweep once took
            cursor.execute("SELECT pg_advisory_lock(hashtext('outbox.sweep'))")
        with transaction.atomic():
            assert _only_sweeper()
            other = connections.create_connection("default")
            try:
                with other.cursor() as cursor:  # a second relay meanwhile: this page is the first's
                    cursor.execute("BEGIN")
                    cursor.execute(_TAKE_THE_SWEEP.format(table=f'"{Lock._meta.db_table}"'))
                    assert cursor.fetchone()[0] is False
                    cursor.execute("ROLLBACK")
            finally:
                other.close()
    finally:
        holder.close()


@pytest.mark.postgres
@pytest.mark.parametrize("per_transaction", [False, True], ids=["as deployed", "per transaction"])
def test_a_context_writes_to_the_outbox_only_its_own_types_of_event_to_their_subscribers(
    transactional_db, settings, per_transaction
):
    """Row-level security bound `source` alone, which nothing downstream reads: a context could
    write another context's event, under its own name, to that event's subscribers, and it was
    relayed and handled as the other's. A context may publish its own types, each to the
    subscribers of that type, and nothing else."""
    settings.OUTBOX_TRANSACTION_POOLER = settings.OUTBOX_TRANSACTION_POOLER or per_transaction
    theirs = DeliveryCompleted(delivery_id=uuid4(), drone_id=uuid4())
    own = DroneGrounded(drone_id=uuid4())
    not_subscribed = next(s for s in subscribers() if s not in subscribers_of(own.type))

    def forged(event, **changes) -> OutboxMessage:
        row = outbox_row(event, stream=f"drone:forged-{uuid4()}", correlation_id=uuid4(), now=timezone.now())
        for field, value in {"source": "drones", "sequence": 1, **changes}.items():
            setattr(row, field, value)
        return row

    attempts = {
        "another context's event": forged(theirs),
        "its own event to one who does not subscribe to it": forged(own, recipients=[not_subscribed]),
        "its own event as a copy for one subscriber": forged(own, target_subscriber=not_subscribed),
        "its own event to recipients that are no list": forged(own, recipients=not_subscribed),
    }
    refused = {}
    for what, row in attempts.items():
        try:
            with roles.acting_as("drones"), transaction.atomic():
                row.save(force_insert=True)
            refused[what] = None
        except ProgrammingError as error:
            refused[what] = str(error)
    assert [what for what, refusal in refused.items() if refusal is None] == []
    assert all("row-level security" in refusal for refusal in refused.values()), refused
    with roles.acting_as("drones"), transaction.atomic():
        forged(own).save(force_insert=True)  # its own, to its subscribers: as publish() writes
    assert set(OutboxMessage.objects.values_list("type", flat=True)) == {own.type}


@pytest.mark.postgres
@pytest.mark.parametrize("per_transaction", [False, True], ids=["as deployed", "per transaction"])
def test_a_request_runs_under_the_context_of_the_longest_prefix_its_path_begins_with(
    transactional_db, settings, per_transaction
):
    """`/api/` is the deliveries', `/api/fleet/` (named after it) the drones': the nearer owner wins."""
    settings.OUTBOX_TRANSACTION_POOLER = settings.OUTBOX_TRANSACTION_POOLER or per_transaction
    settings.OUTBOX_CONTEXT_URLS = {"/api/": "deliveries", "/api/fleet/": "drones"}
    answered = roles.context_roles(lambda request: current_user())
    paths = ["/api/fleet/drones", "/api/deliveries/1", "/admin/"]
    assert [answered(RequestFactory().get(path)) for path in paths] == [
        role_of("drones"),
        role_of("deliveries"),
        current_user(),
    ]


@pytest.mark.postgres
def test_a_message_handed_outside_a_worker_gives_the_connection_back_as_the_operator(probe_is_a_context):
    """A worker's thread keeps its context's role for its next message; anywhere else (a test, a
    shell, outbox.testing.deliver) the code after dispatch is the operator's again."""
    operator = current_user()
    handed = deliver("probe_a", "probe.pinged", {"n": 1, "fail": {"probe_a": "tell_role"}})

    assert probe.role_of[str(handed.envelope.message_id)] == role_of("probe")
    assert current_user() == operator


@pytest.mark.postgres
def test_a_policy_whose_condition_is_out_of_date_is_written_again_by_the_next_migrate(transactional_db):
    """A policy changed by hand (or left from before a subscriber was added) is compared by its
    condition, not its name: written again, the role sees its own rows only once more."""
    table, role = InboxMessage._meta.db_table, role_of("deliveries")
    on = f'"{settings.OUTBOX_SCHEMA}"."{table}"'
    for subscriber in ("drones", "deliveries"):
        InboxMessage.objects.create(
            subscriber=subscriber, message_id=uuid4(), type="probe.pinged", correlation_id=uuid4()
        )
    try:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER POLICY "{role}" ON {on} USING (true)')
            cursor.execute(f"COMMENT ON POLICY \"{role}\" ON {on} IS 'USING (true)'")
        with roles.acting_as("deliveries"), transaction.atomic():
            assert count(InboxMessage) == 2  # the policy as it was left

        said = own_rows()
    finally:
        own_rows()

    assert said == [f"{role} may use only its own rows of {table}"]
    with roles.acting_as("deliveries"), transaction.atomic():
        assert list(InboxMessage.objects.values_list("subscriber", flat=True)) == ["deliveries"]


@pytest.mark.postgres
def test_check_says_to_migrate_when_a_contexts_rows_are_not_what_the_code_declares(transactional_db):
    """As after a subscriber was added under OUTBOX_CONTEXTS and the release deployed without a
    migrate: its context's policy is the one an older release wrote."""
    table, role = InboxMessage._meta.db_table, role_of("deliveries")
    on = f'"{settings.OUTBOX_SCHEMA}"."{table}"'
    assert [w.id for w in checks.run_checks(databases=["default"]) if w.id == "outbox.W014"] == []
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"COMMENT ON POLICY \"{role}\" ON {on} IS 'USING (subscriber = ANY (ARRAY[]::text[]))'")
        [said] = [w for w in checks.run_checks(databases=["default"]) if w.id == "outbox.W014"]
        assert role in said.msg and said.hint == "run `manage.py migrate`"
        assert "outbox.W014" not in {w.id for w in checks.run_checks()}  # without --database: no query
    finally:
        own_rows()
    assert [w.id for w in checks.run_checks(databases=["default"]) if w.id == "outbox.W014"] == []
