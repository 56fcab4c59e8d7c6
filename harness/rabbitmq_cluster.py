"""A RabbitMQ cluster of its own on this machine, for tests and the chaos rig: N nodes, their own epmd, ports and data.

The nodes run Debian's RabbitMQ directly, as children of the test process in process groups of
their own, with their cookie, config and data under `base_dir` and an epmd of the rig's: the
system node (rabbit@localhost on 5672) is never addressed. Nothing outlives the test process
(stop(), an atexit hook, PR_SET_PDEATHSIG): start nodes from the test's own thread.

    with RabbitmqCluster(tmp_path) as cluster:
        cluster.urls              # ["amqp://guest:guest@127.0.0.1:<port>/%2F", ...]
        cluster.stop_node(0)      # graceful (SIGTERM); start_node(0) rejoins with the same data
        cluster.kill_node(1)      # SIGKILL to the node's process group
        cluster.ctl(2, "cluster_status")
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from harness.rig_processes import (
    HOST,
    RESERVED_PORTS,
    a_free_port,
    die_with_parent,
    in_parallel,
    port_open,
    processes_in_group,
)
from harness.waiting import wait_for

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
EPMD = Path("/usr/lib/erlang/bin/epmd")
CTL_PORTS = 8  # rabbitmqctl calls at once, at most (each listens on one)


class RabbitmqCluster:
    """N RabbitMQ nodes on this machine, clustered, with their own epmd; a context manager."""

    def __init__(
        self,
        base_dir: Path,
        size: int = 3,
        amqp_ports: Sequence[int] | None = None,
        dist_ports: Sequence[int] | None = None,
        epmd_port: int | None = None,
        *,
        name_prefix: str = "rig",
        host_part: str = "localhost",
        timeout: float = 60.0,
        die_with_thread: bool = True,
    ):
        # die_with_thread=False for a caller that starts nodes from threads that end before the
        # cluster does (the chaos rig's fault injector); stop() and the atexit hook still apply.
        self.die_with_thread = die_with_thread
        self.base_dir = Path(base_dir).resolve()
        self.size = size
        self.timeout = timeout
        taken: set[int] = {*(amqp_ports or ()), *(dist_ports or ()), *([epmd_port] if epmd_port else [])}

        def free(span: int = 1) -> int:
            first = a_free_port(taken, span)
            taken.update(range(first, first + span))
            return first

        # rabbitmqctl listens for distribution too, on the first free port of a range: the rig's own.
        self.ctl_port_min = free(span=CTL_PORTS)
        self.epmd_port = epmd_port or free()
        self.amqp_ports = list(amqp_ports) if amqp_ports else [free() for _ in range(size)]
        self.dist_ports = list(dist_ports) if dist_ports else [free() for _ in range(size)]
        if self.epmd_port in RESERVED_PORTS or {*self.amqp_ports, *self.dist_ports} & RESERVED_PORTS:
            raise ValueError(f"the rig never takes the system's ports {sorted(RESERVED_PORTS)}")
        if len(self.amqp_ports) != size or len(self.dist_ports) != size:
            raise ValueError(f"{size} nodes need {size} AMQP and {size} distribution ports")
        self.nodes = [f"{name_prefix}{i + 1}@{host_part}" for i in range(size)]
        self.urls = [f"amqp://guest:guest@{HOST}:{port}/%2F" for port in self.amqp_ports]
        self._processes: list[subprocess.Popen | None] = [None] * size
        self._epmd: subprocess.Popen | None = None
        self._atexit_registered = False
        self.timings: dict[str, float] = {}

    # -- the rig's files and environment ------------------------------------------------------

    def node_dir(self, i: int) -> Path:
        return self.base_dir / self.nodes[i].split("@")[0]

    def _common_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RABBITMQ_", "ERL_")) and k not in {"HOME", "NODENAME", "USE_LONGNAME"}
        }
        env.update(
            HOME=str(self.base_dir / "home"),  # .erlang.cookie: the cookie of the nodes and their CLI
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS=HOST,
            RABBITMQ_CONF_ENV_FILE=str(self.base_dir / "rabbitmq-env.conf"),
            RABBITMQ_CTL_DIST_PORT_MIN=str(self.ctl_port_min),
            RABBITMQ_CTL_DIST_PORT_MAX=str(self.ctl_port_min + CTL_PORTS - 1),
            LC_ALL="C.UTF-8",
        )
        return env

    def _node_env(self, i: int) -> dict[str, str]:
        directory = self.node_dir(i)
        return {
            **self._common_env(),
            "RABBITMQ_NODENAME": self.nodes[i],
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.amqp_ports[i]),
            "RABBITMQ_DIST_PORT": str(self.dist_ports[i]),
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_MNESIA_DIR": str(directory / "mnesia" / self.nodes[i]),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(directory / "advanced.config"),  # absent: none
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base_dir / "enabled_plugins"),
            "ERL_CRASH_DUMP": str(directory / "erl_crash.dump"),
            # The distribution listener on loopback only, like the system node's.
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def _write_files(self) -> None:
        home = self.base_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text("RIG" + "".join(random.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ", k=20)))
            cookie.chmod(0o400)  # Erlang refuses a cookie file others can read
        (self.base_dir / "rabbitmq-env.conf").write_text("")
        (self.base_dir / "enabled_plugins").write_text("[].\n")
        for i in range(self.size):
            directory = self.node_dir(i)
            (directory / "log").mkdir(parents=True, exist_ok=True)
            (directory / "rabbitmq.conf").write_text(
                f"listeners.tcp.1 = {HOST}:{self.amqp_ports[i]}\n"
                "loopback_users = none\n"
                "log.console = false\n"
                "log.file.level = info\n"
            )

    # -- processes ----------------------------------------------------------------------------

    def _spawn(self, command: list[str], env: dict[str, str], output: Path) -> subprocess.Popen:
        with open(output, "ab") as out:
            return subprocess.Popen(
                command,
                env=env,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the shell, the beam and its helpers
                preexec_fn=die_with_parent if self.die_with_thread else None,
            )

    def _start_epmd(self) -> None:
        if self._epmd is not None and self._epmd.poll() is None:
            return
        if port_open(self.epmd_port):
            raise RuntimeError(f"port {self.epmd_port} is taken: not the rig's epmd")
        self._epmd = self._spawn(
            [str(EPMD), "-port", str(self.epmd_port), "-address", HOST],
            self._common_env(),
            self.base_dir / "epmd.log",
        )
        wait_for(
            lambda: port_open(self.epmd_port) or self._epmd.poll() is not None,
            timeout=10,
            what=f"the rig's epmd on {self.epmd_port}",
        )
        if self._epmd.poll() is not None:
            raise RuntimeError(f"the rig's epmd exited: {self._tail(self.base_dir / 'epmd.log')}")

    def _spawn_node(self, i: int) -> None:
        if self.running(i):
            raise RuntimeError(f"{self.nodes[i]} is already running")
        for port in (self.amqp_ports[i], self.dist_ports[i]):
            if port_open(port):
                raise RuntimeError(f"port {port} of {self.nodes[i]} is taken by another process")
        self._processes[i] = self._spawn(
            [str(RABBITMQ_BIN / "rabbitmq-server")], self._node_env(i), self.node_dir(i) / "stdout.log"
        )

    def _await_node(self, i: int, deadline: float) -> None:
        process = self._processes[i]

        def listening_or_exited():
            return process.poll() is not None or port_open(self.amqp_ports[i])

        wait_for(listening_or_exited, timeout=max(deadline - time.monotonic(), 0), what=f"{self.nodes[i]} to listen")
        if process.poll() is not None:
            raise RuntimeError(f"{self.nodes[i]} exited with {process.returncode}: {self._node_failure(i)}")
        remaining = max(int(deadline - time.monotonic()), 1)
        self.ctl(i, "await_startup", "--timeout", str(remaining), timeout=remaining + 15)

    def running(self, i: int) -> bool:
        """Whether the rig's process for node i is alive (not whether RabbitMQ has booted)."""
        process = self._processes[i]
        return process is not None and process.poll() is None

    def pid(self, i: int) -> int | None:
        """The pid of node i's process group leader (the rabbitmq-server shell)."""
        process = self._processes[i]
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> RabbitmqCluster:
        """Start the rig's epmd, then every node at once; wait for each (`await_startup`); join nodes
        2.. to node 1 (`stop_app`, `join_cluster`, `start_app`); wait until cluster_status lists all
        of them running. On any failure, everything started is stopped before the error propagates."""
        if not (RABBITMQ_BIN / "rabbitmq-server").exists():
            raise FileNotFoundError(f"no RabbitMQ in {RABBITMQ_BIN}")
        if not self._atexit_registered:
            atexit.register(self._kill_everything)
            self._atexit_registered = True
        began = time.monotonic()
        try:
            fresh = [not (self.node_dir(i) / "mnesia").exists() for i in range(self.size)]
            self._write_files()
            self._start_epmd()
            for i in range(self.size):
                self._spawn_node(i)
            deadline = time.monotonic() + self.timeout
            in_parallel(lambda i: self._await_node(i, deadline), range(self.size))
            self.timings["boot"] = time.monotonic() - began
            joining = [i for i in range(1, self.size) if fresh[i] or self.nodes[0] not in self.running_nodes(i)]
            in_parallel(lambda i: self.ctl(i, "stop_app"), joining)
            for i in joining:  # one at a time: each join changes the cluster's membership
                self.ctl(i, "join_cluster", self.nodes[0])
            in_parallel(lambda i: self.ctl(i, "start_app"), joining)
            self.wait_until_clustered(self.size)
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - began
        return self

    def start_node(self, i: int) -> float:
        """Start node i again on its data directory; wait until it has booted. Returns the seconds it took."""
        began = time.monotonic()
        self._start_epmd()
        self._spawn_node(i)
        try:
            self._await_node(i, time.monotonic() + self.timeout)
        except BaseException:
            self._kill_group(i)
            with contextlib.suppress(Exception):
                self._reap(i, 10)
            raise
        self.timings[f"start_node({i})"] = taken = time.monotonic() - began
        return taken

    def stop_node(self, i: int, timeout: float = 30.0) -> float:
        """Stop node i gracefully (SIGTERM: rabbitmq-server stops the broker, then exits); wait until
        the process is gone and the AMQP port closed. Returns the seconds it took."""
        began = time.monotonic()
        self._signal(i, signal.SIGTERM)
        self._reap(i, timeout)
        self.timings[f"stop_node({i})"] = taken = time.monotonic() - began
        return taken

    def kill_node(self, i: int, timeout: float = 10.0) -> float:
        """SIGKILL node i's process group (shell, beam.smp, erl_child_setup, inet_gethost); wait until
        the port is closed. Returns the seconds it took."""
        began = time.monotonic()
        self._kill_group(i)
        self._reap(i, timeout)
        self.timings[f"kill_node({i})"] = taken = time.monotonic() - began
        return taken

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node (in parallel, gracefully, SIGKILL after `timeout`), then the rig's epmd."""
        began = time.monotonic()
        for i in range(self.size):
            self._signal(i, signal.SIGTERM)
        for i in range(self.size):
            with contextlib.suppress(Exception):
                self._reap(i, max(timeout - (time.monotonic() - began), 1))
        self._kill_everything()
        self.timings["stop"] = time.monotonic() - began

    def __enter__(self) -> RabbitmqCluster:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _signal(self, i: int, sig: int) -> None:
        process = self._processes[i]
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, sig)

    @staticmethod
    def _kill_process_group(process: subprocess.Popen | None) -> None:
        """SIGKILL the group `process` leads, while its id is still ours: the leader not yet reaped
        (a zombie holds the pid) or a member still alive (the kernel never reuses a live group's id)."""
        if process is None:
            return
        if process.returncode is None or processes_in_group(process.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def _kill_group(self, i: int) -> None:
        self._kill_process_group(self._processes[i])

    def _reap(self, i: int, timeout: float) -> None:
        """Wait for node i's shell to exit (SIGKILL its group after `timeout`), then for every process
        of the group to end and the node's ports to close; forget the process once it is all gone."""
        process = self._processes[i]
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(i)
            process.wait(10)
        self._kill_group(i)  # whatever the shell left behind
        gone = f"the processes of {self.nodes[i]} to end"
        wait_for(lambda: not processes_in_group(process.pid), timeout=10, what=gone)
        self._processes[i] = None
        wait_for(
            lambda: not port_open(self.amqp_ports[i]) and not port_open(self.dist_ports[i]),
            timeout=timeout,
            what=f"the ports of {self.nodes[i]} to close",
        )

    def _kill_everything(self) -> None:
        """SIGKILL whatever the rig still runs: the nodes' process groups, then its epmd."""
        for i in range(self.size):
            process = self._processes[i]
            self._kill_process_group(process)
            if process is not None:
                with contextlib.suppress(Exception):
                    process.wait(10)
                    wait_for(lambda p=process: not processes_in_group(p.pid), timeout=10, what="the node's end")
                    self._processes[i] = None
        self._kill_process_group(self._epmd)
        if self._epmd is not None:
            with contextlib.suppress(Exception):
                self._epmd.wait(10)
                self._epmd = None

    def group_pids(self, i: int) -> list[int]:
        """The live processes of node i's process group (read from /proc): the shell, beam.smp, helpers.
        Empty once the node has been stopped or killed."""
        process = self._processes[i]
        return [] if process is None else processes_in_group(process.pid)

    # -- rabbitmqctl ---------------------------------------------------------------------------

    def ctl(self, i: int, *args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
        """`rabbitmqctl -n <node i> *args` against the rig's epmd, with the rig's cookie."""
        result = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.nodes[i], *args],
            env=self._common_env(),
            cwd=self.base_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"rabbitmqctl -n {self.nodes[i]} {' '.join(args)} exited with {result.returncode}:\n"
                f"{result.stdout}{result.stderr}"
            )
        return result

    def ctl_json(self, i: int, *args: str, timeout: float = 60.0):
        return json.loads(self.ctl(i, *args, "--formatter", "json", timeout=timeout).stdout)

    def cluster_status(self, i: int = 0) -> dict:
        return self.ctl_json(i, "cluster_status")

    def running_nodes(self, i: int = 0) -> list[str]:
        """The running nodes of node i's cluster, as node i sees them."""
        return sorted(self.cluster_status(i)["running_nodes"])

    def wait_until_clustered(self, count: int, via: int | None = None, timeout: float | None = None) -> list[str]:
        """Wait until `count` nodes are running in one cluster, as node `via` (default: a running one) sees it."""
        if via is None:
            via = next(i for i in range(self.size) if self.running(i))

        def clustered():
            result = self.ctl(via, "cluster_status", "--formatter", "json", check=False)
            running = json.loads(result.stdout)["running_nodes"] if result.returncode == 0 else []
            return sorted(running) if len(running) == count else None

        return wait_for(clustered, timeout=timeout or self.timeout, what=f"{count} running nodes in the cluster")

    # -- diagnostics ---------------------------------------------------------------------------

    @staticmethod
    def _tail(path: Path, lines: int = 40) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"({path} unreadable)"

    def _node_failure(self, i: int) -> str:
        directory = self.node_dir(i)
        log = directory / "log" / f"{self.nodes[i]}.log"
        return f"\n--- {directory / 'stdout.log'}\n{self._tail(directory / 'stdout.log')}\n--- {log}\n{self._tail(log)}"


def quorum_queue(cluster: RabbitmqCluster, via: int, name: str) -> dict:
    """The queue's type, leader, members and online members as node `via` reports them; {} while
    it cannot tell (an election under way, say)."""
    columns = ("name", "type", "leader", "members", "online")
    result = cluster.ctl(via, "list_queues", *columns, "--formatter", "json", check=False)
    if result.returncode != 0:
        return {}
    return next((row for row in json.loads(result.stdout) if row["name"] == name), {})
