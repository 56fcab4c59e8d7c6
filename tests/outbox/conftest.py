import pytest

from outbox.core.subscriptions import message_to


@pytest.fixture
def deliver(broker):
    """Put an envelope straight on one subscriber's queue, bypassing the relay."""

    def deliver(subscriber: str, body: dict) -> None:
        broker.enqueue(message_to(subscriber, body))

    return deliver


@pytest.fixture
def dead_letter_store_down(transactional_db):
    """A real failure of the dead-letter table (a trigger refuses writes while a flag row exists)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TABLE probe_dead_letter_outage (down boolean);
            INSERT INTO probe_dead_letter_outage VALUES (true);
            CREATE FUNCTION probe_refuse_dead_letters() RETURNS trigger AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM probe_dead_letter_outage) THEN
                RAISE EXCEPTION 'dead-letter store unavailable';
              END IF;
              RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER probe_refuse_dead_letters BEFORE INSERT OR UPDATE ON outbox_deadletter
              FOR EACH ROW EXECUTE FUNCTION probe_refuse_dead_letters();
            """
        )

    def restore():
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM probe_dead_letter_outage")

    yield restore
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER probe_refuse_dead_letters ON outbox_deadletter; "
            "DROP FUNCTION probe_refuse_dead_letters(); DROP TABLE probe_dead_letter_outage;"
        )
