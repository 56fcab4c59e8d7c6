"""Django's PostgreSQL backend, whose pool stops making callers wait while the database is unreachable.

psycopg's pool makes each caller wait its whole `timeout` even when every connection attempt is
refused at once (no server, or no primary yet during a failover), and gunicorn's threads queue
behind it. While the pool's latest attempts have all failed, a caller here waits
DJANGO_DB_UNREACHABLE_TIMEOUT (0.5 s): the 503 comes at once. A success restores the timeout.

It also recognises a transaction pooler it was not told of (PgBouncer without
DATABASE_TRANSACTION_POOLER=1: `prepared statement "_pg3_0" already exists`), logs what to set
once, and /readyz says it too.
"""

import logging
import threading

from django.conf import settings
from django.db.backends.postgresql import base
from django.db.utils import DatabaseErrorWrapper
from django.utils.functional import cached_property

logger = logging.getLogger(__name__)

POOLER_HINT = (
    "DATABASE_URL looks like a pooler in transaction mode (PgBouncer's pool_mode=transaction): set "
    "DATABASE_TRANSACTION_POOLER=1, and give the relays OUTBOX_LISTEN_DATABASE_URL (docs/deployment.md)"
)
# Prepared statements that a session has and the next one has not: the symptoms of a transaction pooler.
_POOLER_SQLSTATES = {"26000", "42P05", "08P01"}  # invalid statement name, duplicate one, protocol violation
pooler_suspected: list[str] = []  # what was seen, once; /readyz reports it


class _PoolerAwareErrors(DatabaseErrorWrapper):
    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None and not pooler_suspected and _pooler_symptom(exc_value):
            pooler_suspected.append(str(exc_value).splitlines()[0])
            logger.error("%s (seen: %s)", POOLER_HINT, pooler_suspected[0])
        return super().__exit__(exc_type, exc_value, traceback)


def _pooler_symptom(error: BaseException) -> bool:
    return (
        not settings.DATABASE_TRANSACTION_POOLER
        and getattr(error, "sqlstate", None) in _POOLER_SQLSTATES
        and "prepared statement" in str(error)
    )


class DatabaseWrapper(base.DatabaseWrapper):
    _reachability_lock = threading.Lock()

    @cached_property
    def wrap_database_errors(self):
        return _PoolerAwareErrors(self)

    def get_new_connection(self, conn_params):
        if (pool := self.pool) is not None:
            with self._reachability_lock:
                pool.timeout = _timeout_for(pool, self.settings_dict["OPTIONS"]["pool"].get("timeout", 30.0))
        return super().get_new_connection(conn_params)


def _timeout_for(pool, full_timeout: float) -> float:
    """The full timeout, unless every attempt since the last success has failed."""
    stats = pool.get_stats()
    failed = stats.get("connections_errors", 0)
    succeeded = stats.get("connections_num", 0) - failed
    seen_failed, seen_succeeded, unreachable = getattr(pool, "delivery_reachability", (0, 0, False))
    if succeeded > seen_succeeded:
        unreachable = False
    elif failed > seen_failed:
        unreachable = True
    pool.delivery_reachability = (failed, succeeded, unreachable)
    return min(full_timeout, settings.DB_POOL_UNREACHABLE_TIMEOUT) if unreachable else full_timeout
