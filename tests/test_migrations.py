from django.core.management import call_command


def test_every_model_change_has_its_migration(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # exits non-zero when one is missing
