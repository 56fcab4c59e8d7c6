from django.db import migrations

from outbox.migrations._on_postgresql import on_postgresql

NOTIFY = """
CREATE OR REPLACE FUNCTION outbox_notify_pending() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER outbox_notify_pending AFTER INSERT ON outbox_outboxmessage
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_pending();
"""
DROP = """
DROP TRIGGER IF EXISTS outbox_notify_pending ON outbox_outboxmessage;
DROP FUNCTION IF EXISTS outbox_notify_pending();
"""


class Migration(migrations.Migration):
    """Wake relays the moment a transaction with new outbox rows commits (NOTIFY waits for commit)."""

    dependencies = [("outbox", "0001_initial")]

    operations = [migrations.RunPython(on_postgresql(NOTIFY), on_postgresql(DROP))]
