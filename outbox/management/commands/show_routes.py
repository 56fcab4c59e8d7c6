from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from outbox.console import choreography_map
from outbox.core.subscriptions import actor_name, queue_name, routing_table
from outbox.management.pipes import QuietWhenStdoutCloses

FORMATS = ("text", "svg", "dot", "mermaid")


class Command(QuietWhenStdoutCloses, BaseCommand):
    help = (
        "Print the routing table: each event type, its subscribers, their queues and handlers; or the "
        "choreography as a picture (--format svg|dot|mermaid), to stdout or into a file (--output)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--format", choices=FORMATS, default="text", help="text (the default), svg, dot or mermaid."
        )
        parser.add_argument(
            "--output",
            help="Write to this file instead of stdout; a .md file gets only its block between "
            f"{choreography_map.MARKERS[0]} and {choreography_map.MARKERS[1]} replaced (mermaid).",
        )

    def handle(self, *, format, output, **options):
        if format == "text":
            rendered = self._table()
        else:
            graph = choreography_map.graph()
            rendered = {"svg": choreography_map.to_svg, "dot": choreography_map.to_dot}.get(
                format, choreography_map.to_mermaid
            )(graph)
        if not output:
            self.stdout.write(rendered, ending="")
            return
        path = Path(output)
        try:
            if path.suffix == ".md":
                if format != "mermaid":
                    raise CommandError("a .md file takes --format mermaid: its block is replaced")
                rendered = choreography_map.replace_block(path.read_text(), rendered)
            path.write_text(rendered)
        except (OSError, ValueError) as error:
            raise CommandError(f"{output}: {error}") from error
        self.stdout.write(f"written: {output}")

    def _table(self) -> str:
        table = routing_table()
        if not table:
            return "no subscriptions\n"
        lines = []
        for event_type, subs in table.items():
            lines.append(event_type)
            for sub in subs:
                handler = f"{sub.handler.__module__}.{sub.handler.__qualname__}"
                versions = ",".join(str(v) for v in sorted(sub.versions))
                lines.append(
                    f"  -> {sub.subscriber:<16} queue {queue_name(sub.subscriber)}, actor {actor_name(sub.subscriber)},"
                    f" v{versions}: {handler}"
                )
        return "\n".join(lines) + "\n"
