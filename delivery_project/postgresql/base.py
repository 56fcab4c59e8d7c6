"""Django's PostgreSQL backend, whose pool stops making callers wait while the database is unreachable.

psycopg's pool makes every caller wait its whole `timeout` for a connection, even when each of
its connection attempts is refused within milliseconds (no server, or, with
target_session_attrs=read-write, no primary yet during a failover). With gunicorn's threads all
waiting out that timeout, the requests behind them queue, and a client waits the timeout plus
the queue for its 503. Here, while the pool's latest attempts have all failed, a caller waits
DJANGO_DB_UNREACHABLE_TIMEOUT (0.5 s) instead: the 503 comes at once, and each thread is free
for the next request. The first attempt that succeeds restores the full timeout.

Nothing else differs from `django.db.backends.postgresql`; the pool's own counters (public
`get_stats()`) tell whether the latest attempts failed.
"""

import threading

from django.conf import settings
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    _reachability_lock = threading.Lock()

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
