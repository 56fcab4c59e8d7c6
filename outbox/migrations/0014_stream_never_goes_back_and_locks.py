from django.db import migrations, models

from outbox.migrations._on_postgresql import on_postgresql

# A stream's number only goes up: numbered anew from below, its next events would collide with
# those still kept, or be dropped as stale by every ordered subscriber. Checked by the WHEN clause
# alone (no function call) on the publishes that move it on.
NEVER_BACK = """
CREATE OR REPLACE FUNCTION outbox_stream_never_goes_back() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = 'stream ' || OLD.name || ' is at '
        || OLD.last_sequence || ': its number never goes back, nor does it change its name';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER outbox_stream_never_goes_back BEFORE UPDATE ON outbox_stream
    FOR EACH ROW WHEN (NEW.last_sequence < OLD.last_sequence OR NEW.name IS DISTINCT FROM OLD.name)
    EXECUTE FUNCTION outbox_stream_never_goes_back();
"""
DROP = """
DROP TRIGGER IF EXISTS outbox_stream_never_goes_back ON outbox_stream;
DROP FUNCTION IF EXISTS outbox_stream_never_goes_back();
"""


def the_sweeps_lock(apps, schema_editor):
    """Its row, there before the first sweep (which would make it, waiting on a second relay's)."""
    apps.get_model("outbox", "Lock").objects.using(schema_editor.connection.alias).get_or_create(name="sweep")


class Migration(migrations.Migration):
    """A stream's number never goes back; the kernel's locks in a table of its own, which no
    context's role may lock."""

    dependencies = [("outbox", "0013_deadletter_last_replayed_at")]

    operations = [
        migrations.RunPython(on_postgresql(NEVER_BACK), on_postgresql(DROP)),
        migrations.CreateModel(
            name="Lock",
            fields=[("name", models.CharField(max_length=50, primary_key=True, serialize=False))],
        ),
        migrations.RunPython(the_sweeps_lock, migrations.RunPython.noop),
    ]
