"""How every process of the deployable writes its lines: plain text by default, one JSON object a
line under LOG_FORMAT=json.

One definition for three readers that configure logging each in their own way: Django's settings
(`LOGGING`), gunicorn's own loggers (`gunicorn.conf.py`, which gunicorn reads before it loads
Django) and the parent process of `rundramatiq` (`delivery_project.workers`, which never loads
Django at all). Lines go to stderr; spans, when the console exporter is on, go elsewhere
(delivery_project/tracing.py), so that a log stream holds only log lines.
"""

import logging
import logging.config
import os

JSON = "json"

FORMATTERS = {
    "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    JSON: {
        "()": "pythonjsonlogger.json.JsonFormatter",
        "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(process)d",
        "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger", "process": "pid"},
    },
}


def chosen_format() -> str:
    return JSON if os.environ.get("LOG_FORMAT", "plain") == JSON else "plain"


def logging_config(*, loggers: dict | None = None, filters: dict | None = None) -> dict:
    """A `dictConfig` for one stderr handler in the chosen format; root at LOG_LEVEL (INFO)."""
    handler = {"class": "logging.StreamHandler", "formatter": chosen_format(), "filters": list(filters or {})}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": filters or {},
        "formatters": FORMATTERS,
        "handlers": {"console": handler},
        "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
        "loggers": loggers or {},
    }


def configure(config: dict) -> None:
    """Django's LOGGING_CONFIG, and the Dramatiq parent's: Python's warnings become log lines
    too (logger `py.warnings`), in the same format, instead of bare text on stderr."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)
