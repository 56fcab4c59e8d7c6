"""DATABASE_URL into Django's DATABASES entry and back, with every connection option kept.

PostgreSQL URLs are parsed by libpq itself (`psycopg.conninfo`), so the URL means what it means
to `psql`: several hosts and ports (`postgres://u@a:5442,b:5443/db`, or `?host=a,b&port=5442,5443`),
`target_session_attrs=read-write`, `sslmode` and its certificates, `application_name`,
`connect_timeout`, `options=-c statement_timeout=5s`, keepalives... Whatever libpq does not know
is an error at start-up, naming the option, rather than an option quietly dropped. Each option
reaches psycopg's `connect()` through Django's OPTIONS, with Django's pool on or off.

SQLite (the embedded default) is left to dj-database-url.
"""

from urllib.parse import quote, urlencode, urlsplit

import dj_database_url
import psycopg
from django.core.exceptions import ImproperlyConfigured
from psycopg.conninfo import conninfo_to_dict

POSTGRESQL = "delivery_project.postgresql"  # Django's, with a pool that fails fast while unreachable
POSTGRESQL_SCHEMES = ("postgres", "postgresql")
# OPTIONS that are Django's or psycopg's own, not libpq connection parameters.
NOT_LIBPQ = ("pool", "isolation_level", "server_side_binding", "assume_role", "prepare_threshold", "cursor_factory")


def parse(url: str, *, setting: str = "DATABASE_URL") -> dict:
    """A DATABASES entry for `url`; a PostgreSQL URL keeps each of its options in OPTIONS."""
    scheme = urlsplit(url).scheme
    if scheme.startswith("sqlite"):
        return dj_database_url.parse(url)
    if scheme not in POSTGRESQL_SCHEMES:
        raise ImproperlyConfigured(
            f"{setting}: {scheme or url!r} is not a database this project runs on: "
            "use postgres://... (or leave it unset for the embedded SQLite)"
        )
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:  # libpq's own words: 'invalid URI query parameter: "sslmod"'
        raise ImproperlyConfigured(f"{setting}: {error}") from None
    return {
        "ENGINE": POSTGRESQL,
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
    }


def connect_params(url: str, *, setting: str) -> dict:
    """psycopg `connect()` keywords for `url` (a connection of a process's own, outside Django's)."""
    entry = parse(url, setting=setting)
    if entry["ENGINE"] != POSTGRESQL:
        raise ImproperlyConfigured(f"{setting}: must be a postgres:// URL")
    named = {
        "dbname": entry["NAME"],
        "user": entry["USER"],
        "password": entry["PASSWORD"],
        "host": entry["HOST"],
        "port": entry["PORT"],
    }
    return {**{key: value for key, value in named.items() if value}, **entry["OPTIONS"]}


def url_of(entry: dict, **changes) -> str:
    """The URL of a DATABASES entry, options included, with `changes` (e.g. `NAME=...`) applied:
    what another process needs to reach the same database the same way. Give it `parse(DATABASE_URL)`,
    not the live settings entry, whose OPTIONS also hold this process's defaults (application_name)."""
    entry = {**entry, **changes}
    if entry["ENGINE"] != POSTGRESQL:
        return f"sqlite:///{entry['NAME']}"
    params = {key: value for key, value in entry.get("OPTIONS", {}).items() if key not in NOT_LIBPQ}
    hosts = [host for host in str(entry["HOST"] or "").split(",") if host]
    ports = [port for port in str(entry["PORT"] or "").split(",") if port]
    if hosts and not any(host.startswith("/") for host in hosts) and len(ports) in (0, 1, len(hosts)):
        ports = ports * len(hosts) if len(ports) == 1 else ports or [""] * len(hosts)  # one port serves all
        netloc = ",".join(f"[{h}]" if ":" in h else h for h in hosts)
        netloc = ",".join(f"{h}:{p}" if p else h for h, p in zip(netloc.split(","), ports, strict=True))
    else:  # a socket directory, or no host: libpq's default
        netloc = ""
        params.update(host=entry["HOST"], port=entry["PORT"])
    user = quote(entry["USER"] or "", safe="") + (f":{quote(entry['PASSWORD'], safe='')}" if entry["PASSWORD"] else "")
    netloc = f"{user}@{netloc}" if user else netloc
    query = urlencode({key: str(value) for key, value in params.items() if value not in ("", None)}, quote_via=quote)
    return f"postgresql://{netloc}/{quote(entry['NAME'], safe='')}" + (f"?{query}" if query else "")
