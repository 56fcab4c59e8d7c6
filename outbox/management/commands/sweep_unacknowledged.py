from django.core.management.base import BaseCommand

from outbox.core.working_database import serving
from outbox.management.arguments import kernel_database, whole_number
from outbox.relaying.sweep import sweep_unacknowledged


class Command(BaseCommand):
    help = (
        "Send relayed events again to each subscriber that has neither processed nor dead-lettered them "
        "OUTBOX_SWEEP_GRACE_SECONDS after they were relayed; after OUTBOX_SWEEP_MAX_RESENDS copies, dead-letter them "
        "as never_acknowledged. Every relay runs the same sweep each OUTBOX_SWEEP_INTERVAL_SECONDS."
    )

    def add_arguments(self, parser):
        kernel_database(parser, what="relayed events are swept")
        parser.add_argument(
            "--limit",
            type=whole_number(at_least=1),
            help="At most this many unsettled events (default: until caught up).",
        )

    def handle(self, *, database, **options):
        with serving(database):
            self._run(**options)

    def _run(self, *, limit, **options):
        swept = sweep_unacknowledged(limit=limit)
        if swept.skipped:
            self.stdout.write("another process is sweeping; nothing done")
            return
        self.stdout.write(
            f"looked at {swept.looked_at} unsettled events in {swept.pages} page(s): "
            f"{swept.settled} acknowledged by every subscriber, "
            f"{swept.resent} copies sent again, {swept.dead_lettered} dead-lettered as never_acknowledged"
        )
