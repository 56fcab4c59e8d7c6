from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from outbox.core.catalog import checked_in, current_schemas, incompatibilities, render


class Command(BaseCommand):
    help = (
        "Write the JSON Schema of every event type and version to docs/events/ (under BASE_DIR, or the current "
        "directory where the project has none). Refuses to overwrite a "
        "version with an incompatible change (a field removed, renamed, retyped or made required): "
        "declare a new version instead."
    )

    def add_arguments(self, parser):
        # BASE_DIR is startproject's convention, not a Django setting: a project may have none.
        base = Path(getattr(settings, "BASE_DIR", "."))
        parser.add_argument("--directory", default=str(base / "docs" / "events"))

    def handle(self, *, directory, **options):
        target = Path(directory)
        try:
            target.mkdir(parents=True, exist_ok=True)
            previous = checked_in(target)
        except OSError as error:  # a file of that name, no permission, a read-only disk
            raise CommandError(f"cannot write the event schemas to {target}: {error.strerror or error}") from error
        except ValueError as error:  # a *.vN.json there that is not JSON
            raise CommandError(f"{target} holds a schema that is not JSON: {error}") from error
        current = current_schemas()
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
                try:
                    path.write_text(render(schema))
                except OSError as error:
                    raise CommandError(f"cannot write {path}: {error.strerror or error}") from error
                written += 1
        for name in sorted(set(previous) - set(current)):
            self.stderr.write(f"kept {name}: no contract declares it any more (old messages may still be queued)")
        self.stdout.write(f"{len(current)} event schemas in {target} ({written} written)")
