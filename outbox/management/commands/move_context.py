import time

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError, connections

from outbox.core.working_database import kernel_databases
from outbox.management.arguments import whole_number
from outbox.models import Heartbeat
from outbox.placement.moves import CannotMove, Moved, move_context
from outbox.relaying.heartbeats import alive, interval


class Command(BaseCommand):
    help = (
        "Move a context's data onto the database OUTBOX_CONTEXT_DATABASES now puts it on: its tables' rows, "
        "the events it published, its subscribers' inbox, cursors and dead letters, and every stream's "
        "numbering; checked, then deleted from the old database. Run `migrate --database <its database>` "
        "first, with web, workers and relays stopped. Safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("context", help="The context's app label (one OUTBOX_CONTEXT_DATABASES names).")
        parser.add_argument(
            "--from",
            dest="source",
            default="default",
            help="The database it was on (default: default).",
        )
        parser.add_argument(
            "--to",
            dest="target",
            help="The database it goes to (default: the one OUTBOX_CONTEXT_DATABASES names; "
            "`--from <its database> --to default` moves it back).",
        )
        parser.add_argument("--batch-size", type=whole_number(at_least=1), default=2000, help="Rows per batch.")

    def handle(self, *, context, source, target, batch_size, verbosity, **options):
        if context not in {config.label for config in apps.get_app_configs()}:
            raise CommandError(f"{context!r} is not an installed app's label")
        target = target or settings.OUTBOX_CONTEXT_DATABASES.get(context)
        if target is None:
            raise CommandError(f"OUTBOX_CONTEXT_DATABASES does not name {context!r}: set where it goes, or --to")
        for option, alias in (("--from", source), ("--to", target)):
            if alias not in settings.DATABASES:
                raise CommandError(f"{option}: {alias!r} is not in DATABASES")
        refuse_beside_running_processes([*kernel_databases(), source, target])
        started = time.monotonic()

        def progress(moved: Moved) -> None:
            if verbosity:
                self.stdout.write(f"  copied {moved.table}: {moved.copied:,} rows")

        if verbosity:
            self.stdout.write(f"moving {context} from {source} to {target}")
        try:
            moved = move_context(label=context, source=source, target=target, batch_size=batch_size, on_table=progress)
        except CannotMove as error:
            raise CommandError(str(error)) from error
        if verbosity:
            deleted = ", ".join(f"{m.table} {m.deleted:,}" for m in moved if m.deleted)
            self.stdout.write(f"checked: every row is on {target}; deleted from {source}: {deleted or 'nothing'}")
            self.stdout.write(f"moved in {time.monotonic() - started:.1f} s")


def refuse_beside_running_processes(databases: list[str]) -> None:
    """A relay or worker still running would write to the old database after the move (the move's
    hold on its tables stops only a process caught mid-write): each says it is alive by its
    heartbeat, in whichever database it serves. Web processes write none: the docs say to stop them."""
    running = []
    for database in dict.fromkeys(databases):
        try:
            if Heartbeat._meta.db_table not in connections[database].introspection.table_names():
                continue  # no tables there yet (`migrate --database` not run): nothing runs on it
            beats = alive(database)
        except OperationalError as error:
            raise CommandError(
                f"the database {database} does not answer, so what runs there is unknown: {error}"
            ) from error
        running += [f"{process} (seen {seconds:.0f} s ago, in {database})" for process, seconds in beats]
    if running:
        raise CommandError(
            f"still running: {', '.join(running)}. Stop web, workers and relays first; one killed rather "
            f"than stopped counts as gone {3 * interval():.0f} s after its last heartbeat."
        )
