from django.db import migrations, models


def fingerprint_the_letters(apps, schema_editor):
    """Letters written before: their fingerprints from what they kept (type and message)."""
    from outbox.core.fingerprints import error_fingerprint

    # The database being migrated (a context on one of its own has the kernel's tables there too).
    letters = apps.get_model("outbox", "DeadLetter").objects.using(schema_editor.connection.alias)
    for letter in letters.only("pk", "exception_type", "error").iterator(chunk_size=2000):
        letters.filter(pk=letter.pk).update(fingerprint=error_fingerprint(letter.exception_type, letter.error))


class Migration(migrations.Migration):
    """Dead letters grouped by cause: (subscriber, event type, reason, fingerprint), the index the
    console's groups read (open letters only are ever grouped)."""

    dependencies = [("outbox", "0011_inbox_processed_brin")]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="fingerprint",
            field=models.CharField(
                blank=True,
                help_text="The error's type and its message with ids, numbers and times taken out: letters failed "
                "for one cause share it (outbox.core.fingerprints).",
                max_length=16,
            ),
        ),
        migrations.RunPython(fingerprint_the_letters, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["status", "subscriber", "type", "reason", "fingerprint"], name="deadletter_group_idx"
            ),
        ),
    ]
