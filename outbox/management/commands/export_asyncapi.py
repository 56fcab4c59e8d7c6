from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from outbox.console import asyncapi


class Command(BaseCommand):
    help = (
        "Write the event catalogue as an AsyncAPI 3.0 document (every channel, message, schema version "
        "and each context's operations), generated from the contracts and the routing table, to "
        "docs/events/asyncapi.json (--output - prints it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "docs" / "events" / "asyncapi.json"))

    def handle(self, *, output, **options):
        text = asyncapi.render(
            asyncapi.document(
                title=getattr(settings, "OUTBOX_ASYNCAPI_TITLE", "Events"),
                version=getattr(settings, "OUTBOX_ASYNCAPI_VERSION", "1.0.0"),
                leave_out=frozenset(getattr(settings, "OUTBOX_ASYNCAPI_LEAVE_OUT", ())),
            )
        )
        if output == "-":
            self.stdout.write(text, ending="")
            return
        try:
            Path(output).write_text(text)
        except OSError as error:
            raise CommandError(f"cannot write the AsyncAPI document to {output}: {error.strerror or error}") from error
        self.stdout.write(f"AsyncAPI {asyncapi.ASYNCAPI_VERSION} document written to {output}")
