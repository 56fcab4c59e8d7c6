"""PostgreSQL as production runs it, for tests and CI: a primary with a streaming replica (failover,
multi-host URLs); PgBouncer's rig (harness/pgbouncer.py) is built on the same machinery.

Like the RabbitMQ cluster rig, each server runs in the foreground in a process group of its own,
dies with the thread that started it (PR_SET_PDEATHSIG), is stopped by its own pid only, listens
on a free port (never 5432, which is never touched) and keeps its files in a directory the rig
removes. As root, the servers run as `postgres`, which refuses root.

    with PostgresPrimaryWithReplica(synchronous=True) as pair:
        pair.url("app")  # postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/app?target_session_attrs=read-write
        pair.stop_primary(), pair.promote()  # a crash (SIGQUIT), pg_ctl promote; each returns seconds
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

from harness.rig_processes import HOST, a_free_port, die_with_parent, port_open, processes_in_group
from harness.waiting import wait_for

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SERVICE_ACCOUNT = "postgres"  # what the servers run as when the rig runs as root
SYSTEM_PORTS = {5432, 5672, 6432}  # the machine's PostgreSQL and RabbitMQ, PgBouncer's default
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
INITDB_OPTIONS = ["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"]
PG_HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
PG_HBA += "local replication all trust\nhost replication all 127.0.0.1/32 trust\n"


def _child_options(cwd: Path) -> dict:
    """Popen's options for every process a rig starts: the service account (as root), an environment
    without PG* variables (a PGPORT must not steer a tool to the system server), the death signal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    account = {"user": SERVICE_ACCOUNT, "group": SERVICE_ACCOUNT, "extra_groups": []} if os.geteuid() == 0 else {}
    env.update(HOME=str(cwd), LC_ALL="C.UTF-8")
    options = {"cwd": cwd, "env": env, "stdin": subprocess.DEVNULL, "start_new_session": True, **account}
    return {**options, "preexec_fn": die_with_parent}  # it runs in the child, after the change of user


def _rig_dir(prefix: str, given: Path | None = None) -> Path:
    """The rig's directory (a new temporary one unless `given`), owned by the account the servers run as."""
    path = Path(given or tempfile.mkdtemp(prefix=prefix)).resolve()
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, pwd.getpwnam(SERVICE_ACCOUNT).pw_uid, pwd.getpwnam(SERVICE_ACCOUNT).pw_gid)
        if subprocess.run(["/usr/bin/test", "-w", str(path)], **_child_options(Path("/"))).returncode:
            raise RuntimeError(f"{path} is out of the {SERVICE_ACCOUNT} account's reach (a parent is closed to it)")
    return path


def _run(command: list, cwd: Path, timeout: float) -> str:
    """A short-lived tool (initdb, pg_basebackup, pg_ctl promote), to its end; its output."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **_child_options(cwd))
    if result.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} exited with {result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


def _processes_of(executable: str, marker: str) -> list[int]:
    """Live processes of `executable` with `marker` in their command line (not a `tail -f` of a log)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # gone, or a zombie: no exe
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found += [int(entry.name)] if os.readlink(entry / "exe") == executable else []
    return found


class _Server:
    """One server of a rig: its process, the leader of its own group, its port and its logs. A
    postmaster's children leave its group (each calls setsid(), InitPostmasterChild) and outlive a
    SIGKILLed one until they notice, so a server's processes are also found by `marker` in their
    command lines: the data directory, in the postmaster's -D and its children's titles (cluster_name)."""

    def __init__(self, command: list, port: int, log: Path, cwd: Path, marker: str):
        if port_open(port):
            raise RuntimeError(f"port {port} is taken: not the rig's")
        self.port, self.logs, self.marker, self.reaped = port, [log], marker, False
        self.executable = str(Path(command[0]).resolve())
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **_child_options(cwd))
        self.pid = self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def group_pids(self) -> list[int]:
        """Its live processes: its group's while the id is still ours, and every one naming the marker."""
        return sorted(
            {*([] if self.reaped else processes_in_group(self.pid)), *_processes_of(self.executable, self.marker)}
        )

    def await_ready(self, ready, timeout: float, what: str) -> None:
        """Wait until `ready()`; a timeout or the server's exit raises with the tails of its logs."""
        try:
            wait_for(lambda: not self.running() or ready(), timeout=timeout, what=what)
        except TimeoutError as error:
            raise RuntimeError(f"{error}{self.tails()}") from None
        if not self.running():
            raise RuntimeError(f"{what}: it exited with {self.process.returncode}{self.tails()}")

    def tails(self, lines: int = 30) -> str:
        logs = [(log, log.read_text(errors="replace").splitlines()) for log in self.logs if log.exists()]
        return "".join(f"\n--- {log}\n" + "\n".join(text[-lines:]) for log, text in logs)

    def kill(self) -> None:
        """SIGKILL the group while its id is still ours (leader unreaped, or a member alive; never once
        reaped: the id may lead someone else's group by then), and whatever names the marker."""
        if not self.reaped and (self.process.returncode is None or processes_in_group(self.pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        for pid in _processes_of(self.executable, self.marker):  # a postmaster's children, each its own group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def reap(self, timeout: float) -> None:
        """Wait for the leader's exit (SIGKILL after `timeout`), all its processes' end, its port closed."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait(10)
        self.kill()  # whatever the leader left behind
        wait_for(lambda: not self.group_pids(), timeout=10, what=f"the processes of {self.marker} to end")
        self.reaped = True
        wait_for(lambda: not port_open(self.port), timeout=10, what=f"port {self.port} to close")


def _connect(port: int, dbname: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(host=HOST, port=port, user="postgres", dbname=dbname, connect_timeout=3, autocommit=True)


def _scalar(port: int, query: str):
    """The first value; None when no server answers there, or the query finds no row yet (a
    standby that has not connected has no row in pg_stat_replication)."""
    try:
        with _connect(port) as conn:
            row = conn.execute(query).fetchone()
    except psycopg.OperationalError:
        return None
    return None if row is None else row[0]


class _Rig:
    """What both rigs share: their servers by role, their directory, and the end of both."""

    ROLES: tuple[str, ...] = ()
    base_dir: Path | None = None
    _keep_dir = False  # a directory the caller gave stays

    def __init__(self):
        self._servers: dict[str, _Server] = {}
        atexit.register(self._kill_everything)  # also after a failure, an interrupted run

    def pid(self, role: str | None = None) -> int | None:  # its process group's id; while it runs
        server = self._servers.get(role or self.ROLES[0])
        return server.pid if server and server.running() else None

    def group_pids(self, role: str | None = None) -> list[int]:
        """The server's live processes (a postmaster and its children); by default the first role's."""
        server = self._servers.get(role or self.ROLES[0])
        return server.group_pids() if server else []

    def _stop_server(self, role: str, sig: int) -> None:
        if (server := self._servers.get(role)) and server.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.pid, sig)
        if server:
            server.reap(self.timeout)

    def stop(self) -> None:
        """Stop each server (STOP_SIGNAL; SIGKILL after `timeout`), then remove the rig's own directory."""
        for role in list(self._servers):
            with contextlib.suppress(Exception):
                self._stop_server(role, self.STOP_SIGNAL)
        self._kill_everything()

    def _kill_everything(self) -> None:
        for server in self._servers.values():
            server.kill()
            with contextlib.suppress(Exception):
                server.process.wait(10)
        if self.base_dir is not None and not self._keep_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class PostgresPrimaryWithReplica(_Rig):
    """A primary and a streaming hot standby (pg_basebackup -R -X stream); a context manager. Roles keep
    their names: after `stop_primary()` and `promote()`, "replica" takes the writes (`which_is_primary()`).
    synchronous=True makes each commit on the primary wait for the replica's flush (synchronous_standby_names
    = its application_name, from primary_conninfo): an acknowledged commit survives the primary's crash.
    It is set by ALTER SYSTEM after the copy: a promoted replica must not wait forever for a standby."""

    ROLES = ("primary", "replica")
    STOP_SIGNAL = signal.SIGINT  # fast shutdown

    def __init__(self, synchronous: bool = False, *, timeout: float = 60.0, application_name: str = "replica1"):
        super().__init__()
        self.synchronous, self.timeout, self.application_name = synchronous, timeout, application_name
        self.primary_port = a_free_port(SYSTEM_PORTS)
        self.replica_port = a_free_port(SYSTEM_PORTS | {self.primary_port})
        self.timings: dict[str, float] = {}

    def port(self, role: str) -> int:
        return {"primary": self.primary_port, "replica": self.replica_port}[role]

    def data_dir(self, role: str) -> Path:
        return self.base_dir / role

    def url(self, dbname: str = "postgres") -> str:
        """The libpq multi-host URL, as production's: whichever of the two takes writes."""
        hosts = f"{HOST}:{self.primary_port},{HOST}:{self.replica_port}"
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def start(self) -> PostgresPrimaryWithReplica:
        """initdb, start the primary, copy it into the replica, start that, wait until it streams (with
        synchronous=True: until the primary counts it its synchronous standby). A failure stops both."""
        began = time.monotonic()
        try:
            self._start_primary()
            self.timings["primary"] = time.monotonic() - began
            replica = self.data_dir("replica")
            conninfo = f"host={HOST} port={self.primary_port} user=postgres application_name={self.application_name}"
            copy = [PG_BIN / "pg_basebackup", "-D", replica, "-d", conninfo, "-R", "-X", "stream", "-c", "fast"]
            _run([*copy, "--no-sync"], self.base_dir, self.timeout)
            with open(replica / "postgresql.conf", "a") as conf:  # a copy of the primary's: its own port
                conf.write(f"port = {self.replica_port}\n")
            self._start_server("replica")
            self._wait_for_standby("state", "streaming")
            if self.synchronous:
                with _connect(self.primary_port) as conn:
                    standby = sql.Literal(self.application_name)
                    conn.execute(sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(standby))
                    conn.execute("ALTER SYSTEM SET synchronous_commit = on")
                    conn.execute("SELECT pg_reload_conf()")
                self._wait_for_standby("sync_state", "sync")
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - began
        return self

    def _start_primary(self) -> None:
        """initdb in the rig's own directory and start the primary (fsync on, as in production)."""
        if not (PG_BIN / "postgres").exists():
            raise FileNotFoundError(f"no PostgreSQL in {PG_BIN}")
        self.base_dir = _rig_dir("pg-pair-")
        primary = self.data_dir("primary")
        _run([PG_BIN / "initdb", "-D", primary, *INITDB_OPTIONS], self.base_dir, self.timeout)
        (primary / "pg_hba.conf").write_text(PG_HBA)
        with open(primary / "postgresql.conf", "a") as conf:
            conf.write(
                f"\n# the rig's\nlisten_addresses = '{HOST}'\nport = {self.primary_port}\n"
                f"unix_socket_directories = '{self.base_dir}'\nwal_level = replica\nmax_wal_senders = 5\n"
                "wal_keep_size = '64MB'\nhot_standby = on\nshared_buffers = '32MB'\nmax_connections = 50\n"
                "log_line_prefix = '%m [%p] %q%a '\n"
            )
        self._start_server("primary")

    def _start_server(self, role: str) -> None:
        port, data = self.port(role), self.data_dir(role)
        command = [PG_BIN / "postgres", "-D", data, "-c", f"cluster_name={data}"]  # cluster_name: the titles
        self._servers[role] = server = _Server(command, port, self.base_dir / f"{role}.log", self.base_dir, str(data))
        server.await_ready(lambda: _scalar(port, "SELECT 1") == 1, self.timeout, f"the {role} on {port} to answer")

    def _wait_for_standby(self, column: str, value: str) -> None:
        query = f"SELECT {column} FROM pg_stat_replication WHERE application_name = '{self.application_name}'"
        what = f"pg_stat_replication on the primary to show {self.application_name} with {column} {value}"
        self._servers["replica"].await_ready(lambda: _scalar(self.primary_port, query) == value, self.timeout, what)

    def connect(self, role: str = "primary", dbname: str = "postgres") -> psycopg.Connection:  # autocommit
        return _connect(self.port(role), dbname)

    def create_database(self, name: str) -> None:
        with self.connect("primary") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def stop_primary(self, mode: str = "immediate") -> float:
        """Stop the primary: "immediate" (SIGQUIT: no shutdown checkpoint, clients cut off), "fast"
        (SIGINT) or "smart" (SIGTERM); wait until its processes are gone and its port closed. Seconds."""
        began = time.monotonic()
        self._stop_server("primary", STOP_SIGNALS[mode])
        self.timings["stop_primary"] = taken = time.monotonic() - began
        return taken

    def promote(self) -> float:
        """pg_ctl promote on the replica; wait until pg_is_in_recovery() is false there. Seconds."""
        began = time.monotonic()
        promote = [PG_BIN / "pg_ctl", "promote", "-D", self.data_dir("replica"), "-w", "-t", str(int(self.timeout))]
        _run(promote, self.base_dir, self.timeout + 10)
        left = "the promoted replica to leave recovery"
        self._servers["replica"].await_ready(lambda: self.in_recovery("replica") is False, self.timeout, left)
        self.timings["promote"] = taken = time.monotonic() - began
        return taken

    def in_recovery(self, role: str) -> bool | None:  # None: no answer
        return _scalar(self.port(role), "SELECT pg_is_in_recovery()")

    def primary_answers(self) -> bool:  # the server started as the primary answers, and takes writes
        return self.in_recovery("primary") is False

    def which_is_primary(self) -> str | None:
        """The role whose server answers out of recovery ("primary" or "replica"); None if neither."""
        return next((role for role in self.ROLES if self.in_recovery(role) is False), None)


class PostgresServer(PostgresPrimaryWithReplica):
    """One PostgreSQL server of the rig's own, to stop and start again (`stop_primary`,
    `start_primary`) as an operator restarts theirs, while the system server goes on serving
    everyone else; `url()` and `connect()` as the pair's, for its one role."""

    ROLES = ("primary",)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{HOST}:{self.primary_port}/{dbname}"

    def start(self) -> PostgresServer:
        try:
            self._start_primary()
        except BaseException:
            self.stop()
            raise
        return self

    def start_primary(self) -> None:
        """Start the stopped server again, on its port and data directory; wait until it answers."""
        self._start_server("primary")
