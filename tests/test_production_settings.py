"""Production settings: DEBUG off refuses the development secret key, and
`manage.py check --deploy` is clean with the README's production variables."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

from django.conf import settings

MANAGE = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    environment.update(DJANGO_SETTINGS_MODULE="delivery_project.settings", **env)
    return subprocess.run([*MANAGE, *args], capture_output=True, text=True, env=environment, timeout=120)


def test_production_refuses_to_start_with_the_development_secret_key():
    run = manage("check", DJANGO_DEBUG="0", DJANGO_ALLOWED_HOSTS="api.example.com")

    assert run.returncode != 0
    assert "DJANGO_SECRET_KEY" in run.stderr and "ImproperlyConfigured" in run.stderr


def test_check_deploy_is_clean_with_the_production_variables():
    run = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="api.example.com",
        DJANGO_SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO",
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "no issues" in run.stdout


def test_development_mode_still_starts_without_any_variable():
    run = manage("check")

    assert run.returncode == 0, run.stderr


def test_commands_start_without_the_login_guards_banner():
    run = manage("help")

    assert run.returncode == 0 and "AXES: BEGIN" not in run.stderr + run.stdout


def test_workers_import_every_contexts_handlers_and_no_other_apps_tasks():
    from django_dramatiq.management.commands.rundramatiq import Command

    modules = Command().discover_tasks_modules()
    assert not [m for m in modules if m.startswith("axes.")]
    assert {"packages.handlers", "drones.handlers", "deliveries.handlers", "notifications.handlers"} <= set(modules)


def email_backend(**env: str) -> str:
    run = manage("shell", "-c", "from django.conf import settings; print(settings.EMAIL_BACKEND)", **env)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().splitlines()[-1]


def test_trying_production_mode_locally_sends_mail_to_the_console_unless_an_smtp_host_is_set():
    production_here = dict(DJANGO_DEBUG="0", DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_LOCAL_HTTP="1")

    assert email_backend(**production_here) == "django.core.mail.backends.console.EmailBackend"
    assert email_backend(**production_here, DJANGO_EMAIL_HOST="smtp.example.com").endswith("smtp.EmailBackend")
    real = dict(DJANGO_DEBUG="0", DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_ALLOWED_HOSTS="api.example.com")
    assert email_backend(**real) == "django.core.mail.backends.smtp.EmailBackend"


def test_the_webhooks_get_a_concurrency_limit_only_when_the_deployment_sets_one():
    def limits(**env: str) -> str:
        said = "from django.conf import settings; print(settings.OUTBOX_SUBSCRIBER_LIMITS)"
        run = manage("shell", "-c", said, **{"OUTBOX_LIMITS_REDIS_URL": "", "WEBHOOKS_CONCURRENCY": "", **env})
        assert run.returncode == 0, run.stderr
        return run.stdout.strip().splitlines()[-1]

    rabbitmq = "amqp://guest:guest@127.0.0.1:5672/%2F"
    assert limits(BROKER_URL="") == "{}"
    assert limits(
        BROKER_URL=rabbitmq, OUTBOX_LIMITS_REDIS_URL="redis://127.0.0.1:6379/0", WEBHOOKS_CONCURRENCY="2"
    ) == ("{'webhooks': {'concurrency': 2}}")
    assert limits(BROKER_URL=rabbitmq) == "{}"
    assert limits(BROKER_URL="", WEBHOOKS_CONCURRENCY="5") == "{'webhooks': {'concurrency': 5}}"
    assert limits(BROKER_URL="", WEBHOOKS_CONCURRENCY="0") == "{}"
