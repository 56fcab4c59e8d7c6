"""What gunicorn reads from the working directory when it starts (`gunicorn delivery_project.wsgi`):
the deployable's settings for it, which an installed wheel names with `-c python:delivery_project.gunicorn_conf`."""

from delivery_project.gunicorn_conf import *  # noqa: F403
