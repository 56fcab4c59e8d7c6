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
# the inbox, publish, wake-ups (the kernel's own tests, run from kernel/ on their settings), the
# admin's forms (server-side cursors), the contexts' roles, the chaos rig's short run.
DEFAULT_TESTS = [
    "kernel/tests/test_relay.py",
    "kernel/tests/test_dispatch.py",
    "kernel/tests/test_publish.py",
    "kernel/tests/test_wake_ups.py",
    "kernel/tests/test_sweep.py",
    "tests/test_admin.py",
    "tests/test_context_schemas.py",  # contexts' roles per transaction, never per session
    "tests/harness/test_chaos.py",
]
KERNEL = Path(__file__).resolve().parent.parent / "kernel"


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
        paths = [arg for arg in argv if Path(arg.split("::")[0]).exists()]  # tests named, or only options
        options = [arg for arg in argv if arg not in paths]
        # In parallel processes, as `./dev test` runs (TEST_PROCESSES, or -n among the options).
        processes = os.environ.get("TEST_PROCESSES") or str((os.cpu_count() or 1) + 1)
        parallel = ["-n", processes, "--dist", "loadgroup"]
        status = 0
        for kernel, tests in ((True, _kernels(paths or DEFAULT_TESTS)), (False, _projects(paths or DEFAULT_TESTS))):
            if tests:
                pytest = [sys.executable, "-m", "pytest", *parallel, *options, *tests]
                ran = subprocess.run(pytest, env=env, cwd=KERNEL if kernel else None, preexec_fn=die_with_parent)
                status = status or ran.returncode
        return status


def _kernels(paths: list[str]) -> list[str]:
    """The kernel's tests among `paths`, as kernel/ (where their settings are) names them."""
    return [path.removeprefix("kernel/") for path in paths if path.startswith("kernel/")]


def _projects(paths: list[str]) -> list[str]:
    return [path for path in paths if not path.startswith("kernel/")]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
