"""`./dev test-pgbouncer [pytest args]`: the kernel's tests through PgBouncer in transaction mode.

Most managed PostgreSQL puts PgBouncer in transaction mode in front of the server, where each
transaction of a client connection may run on a different server session. This starts a PgBouncer
of its own (harness/postgres_servers.py) in front of DATABASE_URL's server and runs pytest with
every process pointed through it, as docs/deployment.md tells production to: DATABASE_URL through
PgBouncer with DATABASE_TRANSACTION_POOLER=1, and the relays' LISTEN direct
(OUTBOX_LISTEN_DATABASE_URL). PGBOUNCER_ADMIN_PORT lets the tests' teardown close PgBouncer's
server connections to their throwaway database, which it keeps for reuse, so it can be dropped.
"""

import os
import subprocess
import sys
from pathlib import Path

from delivery_project import database_url
from harness.pgbouncer import PgBouncer
from harness.rig_processes import die_with_parent

# What PgBouncer changes: claiming and relaying (leases, SKIP LOCKED), dispatch and ordering on
# the inbox, publish, wake-ups, the admin's forms (server-side cursors), the contexts' roles, the chaos rig's short run.
DEFAULT_TESTS = [
    "tests/outbox/test_relay.py",
    "tests/outbox/test_dispatch.py",
    "tests/outbox/test_publish.py",
    "tests/outbox/test_wake_ups.py",
    "tests/outbox/test_sweep.py",
    "tests/test_admin.py",
    "tests/test_context_schemas.py",  # contexts' roles per transaction, never per session
    "tests/harness/test_chaos.py",
]


def main(argv: list[str]) -> int:
    direct = os.environ.get("DATABASE_URL", "")
    server = database_url.parse(direct) if direct else {}
    if server.get("ENGINE") != database_url.POSTGRESQL:
        print("test-pgbouncer needs DATABASE_URL=postgres://... (the server PgBouncer is to stand in front of)")
        return 2
    with PgBouncer(upstream_host=server["HOST"] or "127.0.0.1", upstream_port=int(server["PORT"] or 5432)) as bouncer:
        print(f"PgBouncer (transaction mode) on 127.0.0.1:{bouncer.port} in front of {server['HOST']}:{server['PORT']}")
        env = {
            **os.environ,
            "DATABASE_URL": database_url.url_of(server, HOST="127.0.0.1", PORT=str(bouncer.port)),
            "DATABASE_TRANSACTION_POOLER": "1",
            "OUTBOX_LISTEN_DATABASE_URL": direct,
            "PGBOUNCER_ADMIN_PORT": str(bouncer.port),
        }
        chosen = [arg for arg in argv if Path(arg.split("::")[0]).exists()]  # tests named, or only options
        # In parallel processes, as `./dev test` runs (TEST_PROCESSES, or -n among the options).
        processes = os.environ.get("TEST_PROCESSES") or str((os.cpu_count() or 1) + 1)
        parallel = ["-n", processes, "--dist", "loadgroup"]
        tests = [sys.executable, "-m", "pytest", *parallel, *argv, *([] if chosen else DEFAULT_TESTS)]
        return subprocess.run(tests, env=env, preexec_fn=die_with_parent).returncode  # it ends with this one


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
