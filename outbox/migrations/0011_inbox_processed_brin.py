from django.db import migrations

CREATE = "CREATE INDEX IF NOT EXISTS inbox_processed_brin ON outbox_inboxmessage USING brin (processed_at)"
DROP = "DROP INDEX IF EXISTS inbox_processed_brin"


def on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    """The choreography map counts the messages handled in the last hour, and retention deletes
    those handled before a cutoff: both read the inbox by processed_at. Inbox rows are appended in
    time order, so a BRIN index serves both for a few pages, at next to no cost on the insert
    every handled message makes (a B-tree would add a write to each). PostgreSQL only: SQLite's
    embedded default scans, which suits its size."""

    dependencies = [("outbox", "0010_letters_processed_cursor_stream")]

    operations = [migrations.RunPython(on_postgresql(CREATE), on_postgresql(DROP))]
