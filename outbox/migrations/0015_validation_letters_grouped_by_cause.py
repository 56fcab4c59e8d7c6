from django.db import migrations


def fingerprint_open_letters_again(apps, schema_editor):
    """Open letters of a refused payload were grouped by the values refused: their fingerprints
    again from what they kept, now by each error's location and type (outbox.core.fingerprints)."""
    from outbox.core.fingerprints import error_fingerprint

    letters = apps.get_model("outbox", "DeadLetter").objects.using(schema_editor.connection.alias)
    for letter in letters.filter(status="open").only("pk", "exception_type", "error").iterator(chunk_size=2000):
        fingerprint = error_fingerprint(letter.exception_type, letter.error)
        letters.filter(pk=letter.pk).exclude(fingerprint=fingerprint).update(fingerprint=fingerprint)


class Migration(migrations.Migration):
    dependencies = [("outbox", "0014_stream_never_goes_back_and_locks")]

    operations = [migrations.RunPython(fingerprint_open_letters_again, migrations.RunPython.noop)]
