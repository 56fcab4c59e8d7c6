import time
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from outbox.core.retention import Pruned, prune
from outbox.core.working_database import serving
from outbox.management.arguments import duration_in_days, kernel_database, whole_number


class Command(BaseCommand):
    help = (
        "Delete published outbox rows, inbox rows, resolved dead letters and idle stream cursors older than "
        "the retention window (OUTBOX_RETENTION_SECONDS), in batches of short transactions. Never an "
        "unpublished row or an open dead letter. Safe while relays and workers run; run it daily."
    )

    def add_arguments(self, parser):
        kernel_database(parser, what="kernel tables are pruned")
        parser.add_argument(
            "--older-than-days",
            type=duration_in_days,
            help=f"Retention window in days (default {settings.OUTBOX_RETENTION_SECONDS / 86400:g}, "
            "OUTBOX_RETENTION_SECONDS). Shorter than the redelivery horizon is refused.",
        )
        parser.add_argument(
            "--batch-size", type=whole_number(at_least=1), default=5_000, help="Rows deleted per transaction."
        )

    def handle(self, *, database, **options):
        with serving(database):
            self._run(**options)

    def _run(self, *, older_than_days, batch_size, verbosity, **options):
        window = timedelta(seconds=settings.OUTBOX_RETENTION_SECONDS)
        if older_than_days is not None:
            window = timedelta(days=older_than_days)
        if batch_size < 1:  # through call_command(batch_size=...), which argparse never sees
            raise CommandError("--batch-size must be at least 1")
        started = time.monotonic()

        def progress(pruned: Pruned) -> None:
            if verbosity and (pruned.batches % 10 == 0 or pruned.finished):
                self.stdout.write(f"  {pruned.table}: {pruned.deleted:,} deleted ({pruned.batches} batches)")

        if verbosity:
            days = window.total_seconds() / 86400
            self.stdout.write(f"pruning what is older than {days:g} days (batches of {batch_size:,})")
        try:
            results = prune(older_than=window, batch_size=batch_size, on_batch=progress)
        except ValueError as error:
            raise CommandError(f"{error}: choose a longer window") from error
        if verbosity:
            summary = ", ".join(f"{p.table} {p.deleted:,}" for p in results)
            self.stdout.write(f"pruned in {time.monotonic() - started:.1f} s: {summary}")
