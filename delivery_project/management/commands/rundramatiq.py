"""`rundramatiq`, from django_dramatiq, running Dramatiq's command line through
delivery_project.workers so that every line of the workers' processes has the deployable's format.

The banner django_dramatiq prints (the modules it discovered, the command it runs) becomes DEBUG log
lines: one stream, one format, and quiet at the default level.
"""

import io
import logging
import os
import sys

import dramatiq
from django.core.management.base import CommandError, OutputWrapper
from django_dramatiq.management.commands import rundramatiq

from common.arguments import whole_number

logger = logging.getLogger("delivery_project.workers")
LAUNCHER = "drone-delivery-workers"  # [project.scripts] in pyproject.toml


class _LogLines(io.TextIOBase):
    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                logger.debug(line.strip())
        return len(text)


class Command(rundramatiq.Command):
    def add_arguments(self, parser):
        super().add_arguments(parser)
        for action in parser._actions:  # django_dramatiq's options, with the ranges they need
            if action.dest in ("processes", "threads"):
                action.type = whole_number(at_least=1)

    def handle(self, *args, **options):
        _refuse_unknown_queues(options.get("queues") or [])
        self.stdout = OutputWrapper(_LogLines())
        return super().handle(*args, **{**options, "skip_logging": True})

    def _resolve_executable(self, exec_name):
        if exec_name == "dramatiq":
            launcher = os.path.join(os.path.dirname(sys.executable), LAUNCHER)
            if os.path.isfile(launcher):
                return launcher
            logger.warning("%s is not installed (pip install -e .); Dramatiq's own log format follows", LAUNCHER)
        return super()._resolve_executable(exec_name)


def _refuse_unknown_queues(asked: list[str]) -> None:
    """Dramatiq's workers take any name and serve nothing on one no actor uses: a typo would start
    workers that sit idle. The queues are those of the declared actors (one a subscriber)."""
    known = sorted({actor.queue_name for actor in dramatiq.get_broker().actors.values()})
    unknown = [name for name in asked if name not in known]
    if unknown:
        raise CommandError(f"no such queue: {', '.join(unknown)} (the queues are {', '.join(known)})")
