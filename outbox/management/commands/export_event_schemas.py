from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from outbox.catalog import checked_in, current_schemas, incompatibilities, render


class Command(BaseCommand):
    help = (
        "Write the JSON Schema of every event type and version to docs/events/. Refuses to overwrite a "
        "version with an incompatible change (a field removed, renamed, retyped or made required): "
        "declare a new version instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("--directory", default=str(Path(settings.BASE_DIR) / "docs" / "events"))

    def handle(self, *, directory, **options):
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        previous, current = checked_in(target), current_schemas()
        broken = {
            name: problems
            for name, schema in current.items()
            if name in previous and (problems := incompatibilities(previous[name], schema))
        }
        if broken:
            lines = [f"{name}: {'; '.join(problems)}" for name, problems in broken.items()]
            raise CommandError("incompatible changes without a new version:\n  " + "\n  ".join(lines))
        written = 0
        for name, schema in current.items():
            path = target / name
            if not path.exists() or path.read_text() != render(schema):
                path.write_text(render(schema))
                written += 1
        for name in sorted(set(previous) - set(current)):
            self.stderr.write(f"kept {name}: no contract declares it any more (old messages may still be queued)")
        self.stdout.write(f"{len(current)} event schemas in {target} ({written} written)")
