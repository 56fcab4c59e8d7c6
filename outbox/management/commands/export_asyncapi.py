import argparse
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from outbox.console import asyncapi
from outbox.management.pipes import QuietWhenStdoutCloses


def named_server(text: str) -> tuple[str, dict]:
    """`--server NAME=URL`: a server's name and its Server Object, refused at once when malformed."""
    name, equals, url = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=URL")
    try:
        return asyncapi.server_name(name), asyncapi.server(url)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class Command(QuietWhenStdoutCloses, BaseCommand):
    help = (
        "Write the event catalogue as an AsyncAPI 3.0 document (every channel, message, schema version "
        "and each context's operations), generated from the contracts and the routing table, to "
        "docs/events/asyncapi.json under BASE_DIR, or under the current directory where the project has no "
        "BASE_DIR (--output - prints it). Its title, version and servers are OUTBOX_ASYNCAPI_TITLE, "
        "OUTBOX_ASYNCAPI_VERSION and OUTBOX_ASYNCAPI_SERVERS unless the options below say otherwise."
    )

    def add_arguments(self, parser):
        # BASE_DIR is startproject's convention, not a Django setting: a project may have none.
        base = Path(getattr(settings, "BASE_DIR", "."))
        parser.add_argument("--output", default=str(base / "docs" / "events" / "asyncapi.json"))
        parser.add_argument("--title", help="the document's title (info.title) instead of OUTBOX_ASYNCAPI_TITLE")
        # Not --version: every Django command has that one, for Django's own version.
        parser.add_argument(
            "--api-version", help="the catalogue's version (info.version) instead of OUTBOX_ASYNCAPI_VERSION"
        )
        parser.add_argument(
            "--server",
            type=named_server,
            action="append",
            default=[],
            metavar="NAME=URL",
            help="a server, e.g. production=amqps://user:secret@rabbit.example/%%2F (the document keeps its "
            "scheme, host, port and path, never a user, password or query); repeat it for several. "
            "Given, it replaces OUTBOX_ASYNCAPI_SERVERS",
        )
        parser.add_argument(
            "--servers-from-broker",
            action="store_true",
            help="name as servers the broker this project's Dramatiq uses (DRAMATIQ_BROKER's url: `broker`, or "
            "`broker_1`, `broker_2`... for a cluster's nodes), without its credentials; replaces "
            "OUTBOX_ASYNCAPI_SERVERS, with --server's beside them",
        )

    def handle(self, *, output, title, api_version, server, servers_from_broker, **options):
        servers = None  # the settings'
        if servers_from_broker or server:
            servers = {**(self.broker_servers() if servers_from_broker else {}), **dict(server)}
        try:
            document = asyncapi.from_settings(title=title, version=api_version, servers=servers)
        except ValueError as error:  # a server of OUTBOX_ASYNCAPI_SERVERS named or given wrongly
            raise CommandError(f"OUTBOX_ASYNCAPI_SERVERS: {error}") from error
        text = asyncapi.render(document)
        if output == "-":
            self.stdout.write(text, ending="")
            return
        try:
            Path(output).write_text(text)
        except OSError as error:
            raise CommandError(f"cannot write the AsyncAPI document to {output}: {error.strerror or error}") from error
        self.stdout.write(f"AsyncAPI {asyncapi.ASYNCAPI_VERSION} document written to {output}")

    @staticmethod
    def broker_servers() -> dict[str, dict]:
        urls = getattr(settings, "DRAMATIQ_BROKER", {}).get("OPTIONS", {}).get("url")
        if not urls:
            raise CommandError(
                "--servers-from-broker: DRAMATIQ_BROKER's OPTIONS name no url (an embedded broker has no "
                "address another program could reach): give --server NAME=URL instead"
            )
        try:
            return asyncapi.servers_of_broker(urls)
        except ValueError as error:  # a unix:// socket: no host
            raise CommandError(f"--servers-from-broker: {error}") from error
