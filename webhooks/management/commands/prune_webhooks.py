import time
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.arguments import duration_in_days, whole_number
from webhooks.retention import Pruned, prune


class Command(BaseCommand):
    help = (
        "Delete webhook messages delivered or given up (with their attempts) and the heard changes of quiet "
        "deliveries, older than WEBHOOKS_RETENTION_SECONDS, in batches of short transactions. Never a message "
        "still owed. Safe while workers run; run it daily."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than-days",
            type=duration_in_days,
            help=f"Retention window in days (default {settings.WEBHOOKS_RETENTION_SECONDS / 86400:g}, "
            "WEBHOOKS_RETENTION_SECONDS). Shorter than WEBHOOKS_RETRY_FOR_SECONDS is refused.",
        )
        parser.add_argument(
            "--batch-size", type=whole_number(at_least=1), default=5_000, help="Rows deleted per transaction."
        )

    def handle(self, *, older_than_days, batch_size, verbosity, **options):
        window = timedelta(seconds=settings.WEBHOOKS_RETENTION_SECONDS)
        if older_than_days is not None:
            window = timedelta(days=older_than_days)
        if batch_size < 1:  # through call_command(batch_size=...), which argparse never sees
            raise CommandError("--batch-size must be at least 1")
        started = time.monotonic()

        def progress(pruned: Pruned) -> None:
            if verbosity and (pruned.batches % 10 == 0 or pruned.finished):
                self.stdout.write(f"  {pruned.table}: {pruned.deleted:,} deleted ({pruned.batches} batches)")

        if verbosity:
            self.stdout.write(f"pruning what is older than {window.total_seconds() / 86400:g} days")
        try:
            results = prune(older_than=window, batch_size=batch_size, on_batch=progress)
        except ValueError as error:
            raise CommandError(f"{error}: choose a longer window") from error
        if verbosity:
            summary = ", ".join(f"{p.table} {p.deleted:,}" for p in results)
            self.stdout.write(f"pruned in {time.monotonic() - started:.1f} s: {summary}")
