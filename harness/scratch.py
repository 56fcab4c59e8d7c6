"""A database and a queue prefix of a run's own, for `chaos` and `bench`: created, migrated,
used, then dropped, so a run never touches the configured database or another run's queues."""

import contextlib
import io
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections

from delivery_project import database_url
from outbox.core.brokers import broker_urls
from outbox.core.rabbitmq import amqp_parameters
from outbox.core.subscriptions import routing_table
from outbox.core.working_database import kernel_databases


@dataclass(frozen=True)
class Scratch:
    run: str
    database: str
    database_url: str
    queue_prefix: str
    # CONTEXT_DATABASE_URLS pointed at the run's own database on each context's server, if any
    context_database_urls: str = ""

    def env(self) -> dict[str, str]:
        """The environment of a process that is to work in this run's database and queues."""
        env = {**os.environ, "DATABASE_URL": self.database_url, "OUTBOX_QUEUE_PREFIX": self.queue_prefix}
        if self.context_database_urls:
            env["CONTEXT_DATABASE_URLS"] = self.context_database_urls
        if settings.OUTBOX_LISTEN_DATABASE_URL:  # the relays' direct LISTEN, to this run's database too
            listen = database_url.parse(settings.OUTBOX_LISTEN_DATABASE_URL)
            env["OUTBOX_LISTEN_DATABASE_URL"] = database_url.url_of(listen, NAME=self.database)
        return env


@contextlib.contextmanager
def scratch_run(kind: str, *, keep: bool = False) -> Iterator[Scratch]:
    """Point this process's connection at a new, migrated PostgreSQL database; drop it (and
    the run's queues) at the end unless `keep`. A context on a database of its own
    (CONTEXT_DATABASE_URLS) gets one of the run's own on its server too, dropped with it."""
    if connection.vendor != "postgresql":
        raise RuntimeError(f"{kind} runs on PostgreSQL: set DATABASE_URL=postgres://...")
    run = uuid.uuid4().hex[:8]
    scratch = Scratch(run=run, database=f"{kind}_{run}", database_url="", queue_prefix=f"{kind}-{run}-")
    admins = {alias: _server_connection(alias) for alias in kernel_databases()}
    # One name for each (a context's database may be on default's server): `chaos_1a2b3c4d_drones`.
    names = {alias: scratch.database + ("" if alias == "default" else f"_{alias}") for alias in admins}
    made = []
    try:
        for alias, admin in admins.items():
            admin.execute(f'CREATE DATABASE "{names[alias]}"')
            made.append(alias)
        urls = {alias: _use_database(names[alias], alias) for alias in admins}
        contexts = " ".join(f"{label}={urls[alias]}" for label, alias in settings.OUTBOX_CONTEXT_DATABASES.items())
        scratch = Scratch(**{**scratch.__dict__, "database_url": urls["default"], "context_database_urls": contexts})
        for alias in admins:
            call_command("migrate", database=alias, interactive=False, verbosity=0, stdout=io.StringIO())
        yield scratch
    finally:
        for alias in admins:
            connections[alias].close()
            if getattr(connections[alias], "pool", None):
                connections[alias].close_pool()
        delete_queues(scratch.queue_prefix)
        for alias, admin in admins.items():
            if not keep and alias in made:
                admin.execute(f'DROP DATABASE IF EXISTS "{names[alias]}" WITH (FORCE)')
            admin.close()


def connection_params(alias: str = "default") -> dict:
    """This process's connection parameters, for a psycopg connection of its own."""
    params = connections[alias].get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params


def _server_connection(alias: str = "default") -> psycopg.Connection:
    return psycopg.connect(**{**connection_params(alias), "dbname": "postgres"}, autocommit=True)


def _use_database(name: str, alias: str = "default") -> str:
    """Point this process's `alias` at `name`; the URL that points other processes there."""
    db = connections[alias].settings_dict
    url = settings.DATABASE_URL if alias == "default" else _context_urls()[alias]
    db["NAME"] = name
    connections[alias].close()
    return database_url.url_of(database_url.parse(url), NAME=name)  # every option kept


def _context_urls() -> dict[str, str]:
    """CONTEXT_DATABASE_URLS as the deployable read it: alias -> URL."""
    return dict(item.split("=", 1) for item in settings.CONTEXT_DATABASE_URLS.split())


def delete_queues(prefix: str) -> None:
    """Every subscriber queue under `prefix` (with Dramatiq's delay and dead-letter queues)."""
    if not urlsplit(settings.BROKER_URL).scheme.startswith("amqp"):
        return
    import pika

    subscribers = {s.subscriber for subs in routing_table().values() for s in subs}
    with pika.BlockingConnection(amqp_parameters(broker_urls(settings.BROKER_URL))) as broker:
        channel = broker.channel()
        for subscriber in subscribers:
            for suffix in ("", ".DQ", ".XQ"):
                channel.queue_delete(f"{prefix}{subscriber}{suffix}")
