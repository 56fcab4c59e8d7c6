"""PgBouncer as managed PostgreSQL runs it in front of a server, for tests and CI: its own ini, port,
socket and directory, on the machinery of harness/postgres_servers.py (a process group of its own,
stopped by its own pid only, every wait with a deadline).

    with PgBouncer(upstream_port=5432, pool_mode="transaction") as bouncer:
        bouncer.url("app")  # postgresql://postgres@127.0.0.1:<its port>/app

`python -m harness.pgbouncer pgbouncer --upstream-port 5432 [--port N] [--dir D]` runs one in the
foreground for a CI script: it prints the port, and stops it on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

import psycopg

from harness.postgres_servers import SYSTEM_PORTS, _connect, _Rig, _rig_dir, _Server
from harness.rig_processes import HOST, a_free_port
from harness.waiting import wait_for

PGBOUNCER = Path("/usr/sbin/pgbouncer")


class PgBouncer(_Rig):
    """PgBouncer 1.18 in front of one server, with its own ini, port and socket; a context manager. Every
    database name goes upstream (`* = host= port=`); the one user is postgres (trust, as upstream).
    server_reset_query is empty: in transaction mode a server passes from client to client between
    transactions with whatever a session-level SET left on it. A startup parameter it does not track
    fails the connection ("unsupported startup parameter"): extra_float_digits (JDBC) and options
    (`?options=-c ...` in a URL) are in ignore_startup_parameters, so accepted, and dropped. A
    caller's `base_dir` is left in place; the rig's own temporary one is removed."""

    ROLES = ("pgbouncer",)
    STOP_SIGNAL = signal.SIGTERM  # PgBouncer 1.18: immediate shutdown (SIGINT waits for clients)

    def __init__(
        self, upstream_host: str = HOST, upstream_port: int = 5432, pool_mode: str = "transaction",
        default_pool_size: int = 20, max_client_conn: int = 500,
        *, port: int | None = None, base_dir: Path | None = None, timeout: float = 30.0,
    ):  # fmt: skip
        if port in SYSTEM_PORTS:
            raise ValueError(f"the rig never takes the system's ports {sorted(SYSTEM_PORTS)}")
        super().__init__()
        self.upstream_host, self.upstream_port, self.pool_mode = upstream_host, upstream_port, pool_mode
        self.default_pool_size, self.max_client_conn, self.timeout = default_pool_size, max_client_conn, timeout
        self.port = port or a_free_port(SYSTEM_PORTS | {upstream_port})
        self._given_dir, self._keep_dir, self.log_path = base_dir, base_dir is not None, None

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/{dbname}"

    def _write_ini(self) -> Path:
        (self.base_dir / "userlist.txt").write_text('"postgres" ""\n')
        ini = self.base_dir / "pgbouncer.ini"
        ini.write_text(
            f"[databases]\n* = host={self.upstream_host} port={self.upstream_port}\n\n[pgbouncer]\n"
            f"listen_addr = {HOST}\nlisten_port = {self.port}\nunix_socket_dir = {self.base_dir}\n"
            f"auth_type = trust\nauth_file = {self.base_dir / 'userlist.txt'}\nadmin_users = postgres\n"
            f"pool_mode = {self.pool_mode}\ndefault_pool_size = {self.default_pool_size}\n"
            f"max_client_conn = {self.max_client_conn}\nserver_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.log_path}\npidfile = {self.base_dir / 'pgbouncer.pid'}\n"
            "log_connections = 0\nlog_disconnections = 0\n"
        )
        return ini

    def start(self) -> PgBouncer:
        """Write the ini, start pgbouncer in the foreground, wait until its admin console answers."""
        if not PGBOUNCER.exists():
            raise FileNotFoundError(f"no PgBouncer at {PGBOUNCER}")
        try:
            self.base_dir = _rig_dir("pgbouncer-", self._given_dir)
            self.log_path = self.base_dir / "pgbouncer.log"
            ini = self._write_ini()
            server = _Server([PGBOUNCER, ini], self.port, self.base_dir / "stdout.log", self.base_dir, str(ini))
            self._servers["pgbouncer"] = server
            server.logs.append(self.log_path)  # its errors, once it has read the ini
            server.await_ready(self.answers, self.timeout, f"PgBouncer on {self.port} to answer")
        except BaseException:
            self.stop()
            raise
        return self

    def answers(self) -> bool:
        with contextlib.suppress(psycopg.OperationalError):
            return bool(self.admin("SHOW VERSION"))
        return False

    def admin(self, command: str) -> list[dict[str, str | None]]:
        """A command on the admin console (database "pgbouncer"): SHOW POOLS, RECONNECT db, KILL db,
        RESUME db...; its rows as dicts. The console speaks the simple query protocol only: PQexec."""
        with _connect(self.port, "pgbouncer") as conn:
            result = conn.pgconn.exec_(command.encode())
        if result.status not in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK):
            raise RuntimeError(f"PgBouncer: {command}: {result.error_message.decode(errors='replace').strip()}")
        names = [result.fname(c).decode() for c in range(result.nfields)]
        rows = [[result.get_value(r, c) for c in range(result.nfields)] for r in range(result.ntuples)]
        return [{name: v if v is None else v.decode() for name, v in zip(names, row, strict=True)} for row in rows]

    def server_connections(self, dbname: str) -> list[dict]:
        return [row for row in self.admin("SHOW SERVERS") if row["database"] == dbname]

    def close_server_connections(self, dbname: str) -> None:
        """Close PgBouncer's connections to `dbname` upstream: it keeps idle ones for reuse, and those
        make DROP DATABASE fail. RECONNECT closes each once released (idle ones within ~0.3 s, by its
        janitor; clients stay connected); wait until SHOW SERVERS lists none."""
        self.admin(f"RECONNECT {dbname}")
        wait_for(lambda: not self.server_connections(dbname), timeout=self.timeout, what=f"no server for {dbname}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


def main(argv: list[str] | None = None) -> int:
    """`pgbouncer`: one in the foreground, its port printed, until SIGTERM or SIGINT (0) or its end (1)."""
    parser = argparse.ArgumentParser(prog="python -m harness.pgbouncer")
    bouncer_args = parser.add_subparsers(dest="rig", required=True).add_parser("pgbouncer")
    bouncer_args.add_argument("--upstream-host", default=HOST)
    bouncer_args.add_argument("--upstream-port", type=int, default=5432)
    bouncer_args.add_argument("--port", type=int, help="default: a free one")
    bouncer_args.add_argument("--dir", type=Path, help="for its ini, log and socket, kept (default: a temporary one)")
    bouncer_args.add_argument("--pool-mode", default="transaction", choices=["session", "transaction", "statement"])
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        bouncer = PgBouncer(args.upstream_host, args.upstream_port, args.pool_mode, port=args.port, base_dir=args.dir)
        with bouncer:
            print(bouncer.port, flush=True)
            while bouncer.pid() and not stopping.wait(0.5):
                pass
            if not stopping.is_set():
                raise RuntimeError(f"PgBouncer exited:\n{bouncer.log_text()[-3000:]}")
    except (OSError, RuntimeError, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
