from django.db import migrations

from outbox.migrations._on_postgresql import on_postgresql

CREATE = "CREATE INDEX IF NOT EXISTS inbox_processed_brin ON outbox_inboxmessage USING brin (processed_at)"
DROP = "DROP INDEX IF EXISTS inbox_processed_brin"


class Migration(migrations.Migration):
    """The choreography map counts the messages handled in the last hour, and retention deletes
    those handled before a cutoff: both read the inbox by processed_at. Inbox rows are appended in
    time order, so a BRIN index serves both for a few pages, at next to no cost on the insert
    every handled message makes (a B-tree would add a write to each). PostgreSQL only: SQLite's
    embedded default scans, which suits its size."""

    dependencies = [("outbox", "0010_letters_processed_cursor_stream")]

    operations = [migrations.RunPython(on_postgresql(CREATE), on_postgresql(DROP))]
