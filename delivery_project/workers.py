"""Dramatiq's command line with the deployable's log format: what `manage.py rundramatiq` runs.

Dramatiq's parent process starts, watches and stops the worker processes and never loads Django,
so it would write lines in a format of its own (`[dramatiq.MainProcess] [INFO] ...`), plain text
even under LOG_FORMAT=json. Configured here before Dramatiq starts, it writes the same lines as
every other process; the workers it forks are configured by Django's settings when they load them
(`--skip-logging` keeps Dramatiq from configuring them first).
"""

import sys

import dramatiq.cli

from delivery_project import log_format


def main() -> None:
    log_format.configure(log_format.logging_config(loggers={"pika": {"level": "CRITICAL"}}))
    sys.exit(dramatiq.cli.main())


if __name__ == "__main__":
    main()
