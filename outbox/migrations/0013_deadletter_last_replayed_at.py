from django.db import migrations, models


def from_the_notes(apps, schema_editor):
    """Letters replayed before: their replay time is the stamp resolve_letter wrote (resolved_at)
    while they are still replayed or failed again; a processed one's is later, and left empty."""
    letters = apps.get_model("outbox", "DeadLetter").objects.using(schema_editor.connection.alias)
    letters.filter(replays__gt=0, status__in=["replayed", "open"]).update(
        last_replayed_at=models.F("resolved_at")
    )


class Migration(migrations.Migration):
    """When a letter was last replayed, so that a group can say which of its letters failed after
    its replay: the cause was not fixed, or a replay under way meets new failures."""

    dependencies = [("outbox", "0012_deadletter_fingerprint")]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="last_replayed_at",
            field=models.DateTimeField(
                blank=True, help_text="When it was last sent again: its group tells what failed after.", null=True
            ),
        ),
        migrations.RunPython(from_the_notes, migrations.RunPython.noop),
    ]
