"""gunicorn's settings: `gunicorn.conf.py` in a checkout, `-c python:delivery_project.gunicorn_conf` from the wheel.

Its own lines (booting, workers started, a worker timed out) in the deployable's format, JSON
under LOG_FORMAT=json like every other line of the web process. The access log is off, as it is in
gunicorn by default; WEB_ACCESS_LOG=1 writes one line per request in the same format.
"""

import os

from delivery_project import log_format

_access = "INFO" if os.environ.get("WEB_ACCESS_LOG") == "1" else "WARNING"
logconfig_dict = log_format.logging_config(
    loggers={
        "gunicorn.error": {"level": os.environ.get("LOG_LEVEL", "INFO"), "propagate": True},
        "gunicorn.access": {"level": _access, "propagate": True},
    }
)
