"""Hosts of their own on this machine, for tests: network namespaces on veth links, with a cable to pull.

    with NetworkHosts(2, ports=[5432], tagged_ports=cluster.amqp_ports) as hosts:
        h1, h2 = hosts
        h1.reach("postgres://postgres@127.0.0.1:5432/test")   # -> postgres://postgres@10.x.1.1:5432/test
        process = h1.popen([*MANAGE, "relay_outbox"], env=..., log=tmp_path / "h1-relay.log")
        hosts.hold_replies(h1, cluster.amqp_ports)  # the servers' bytes to h1 stop, its own go on
        hosts.cut(h1)            # its link down: established connections stall, no RST
        hosts.restore(h1)        # its link up again

A host reaches the servers only over its link, through forwarders (threads of the test) on its
gateway; `tagged_ports` forwarders connect from 127.0.0.(10 + i) so RabbitMQ tells hosts apart.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from harness.rig_processes import processes_in_group
from harness.waiting import wait_for

logger = logging.getLogger(__name__)

IP = "/usr/sbin/ip" if Path("/usr/sbin/ip").exists() else "ip"
LOOPBACK = "127.0.0.1"

_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the thread that started it ends (Linux)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def can_make_hosts() -> bool:
    """Whether this process may make namespaces and veth pairs: root, with iproute2 and unshare."""
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in (IP, "unshare", "timeout", "bash"))


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} exited with {result.returncode}: {result.stderr.strip()}")
    return result


class Forwarder:
    """Listens on (address, port) and forwards each connection to `target`, two threads a
    connection (a stalled one blocks nobody else). `hold_replies()` stops passing the target's
    bytes back, `pass_replies()` lets them through again; `stop()` closes everything."""

    def __init__(self, address: str, port: int, target: tuple[str, int], *, source: str | None = None):
        self.address, self.port, self.target, self.source = address, port, target, source
        self.accepted = 0
        self._replies = threading.Event()
        self._replies.set()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._upstream: set[socket.socket] = set()
        self._listener = socket.create_server((address, port))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, daemon=True, name=f"forward {address}:{port}")
        self._thread.start()

    def hold_replies(self) -> None:
        self._replies.clear()

    def pass_replies(self) -> None:
        self._replies.set()

    def stop(self) -> None:
        self._stopped.set()
        self._replies.set()
        self._thread.join(5)
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            self._close(sock)

    def upstream_ports(self) -> set[int]:
        """The local ports of its open connections to the target: how the server tells them apart
        (PostgreSQL's pg_stat_activity.client_port)."""
        ports = set()
        with self._lock:
            for sock in self._upstream:
                with contextlib.suppress(OSError):
                    ports.add(sock.getsockname()[1])
        return ports

    def _accept(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    if self._stopped.is_set():
                        return
                    raise
                self.accepted += 1
                threading.Thread(target=self._connect, args=(client,), daemon=True).start()
        finally:
            self._listener.close()

    def _connect(self, client: socket.socket) -> None:
        client.settimeout(None)
        try:
            upstream = socket.create_connection(
                self.target, timeout=5, source_address=(self.source, 0) if self.source else None
            )
        except OSError as error:
            logger.debug("forwarder %s:%d could not reach %s: %s", self.address, self.port, self.target, error)
            self._close(client)
            return
        upstream.settimeout(None)
        with self._lock:
            if self._stopped.is_set():
                for sock in (client, upstream):
                    self._close(sock)
                return
            self._sockets.update((client, upstream))
            self._upstream.add(upstream)
        threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
        self._pump(upstream, client, self._replies)

    def _pump(self, source: socket.socket, sink: socket.socket, gate: threading.Event | None) -> None:
        """Copy source to sink until either ends; while `gate` is clear, what was read waits."""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while gate is not None and not gate.wait(0.2):
                    if self._stopped.is_set():
                        return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
            self._upstream.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv or sendall on it
        with contextlib.suppress(OSError):
            sock.close()


@dataclass
class Host:
    """One namespace: its name (also its hostname), its veth ends, addresses and forwarders."""

    index: int
    namespace: str
    root_veth: str
    host_veth: str
    gateway: str  # the root side, where its forwarders listen
    address: str  # its own
    forwarders: dict[int, Forwarder] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)
    cut_off: bool = False

    @property
    def hostname(self) -> str:
        return self.namespace

    def reach(self, value: str) -> str:
        """A URL (or several, separated by spaces) with 127.0.0.1/localhost replaced by this host's
        gateway; the port must be forwarded."""
        return " ".join(self._reach_one(url) for url in value.split())

    def _reach_one(self, url: str) -> str:
        parts = urlsplit(url)
        if parts.hostname not in (LOOPBACK, "localhost"):
            raise ValueError(f"{url!r} does not point at {LOOPBACK}")
        port = parts.port
        if port is None and parts.scheme.startswith("postgres"):
            port = 5432
        if port not in self.forwarders:
            raise ValueError(f"port {port} of {url!r} is not forwarded to {self.namespace}")
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{self.gateway}:{port}" if userinfo else f"{self.gateway}:{port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def popen(self, command: Sequence[str], *, env: dict[str, str], log: Path) -> subprocess.Popen:
        """Start `command` inside the namespace, hostname = the namespace's name, output to `log`."""
        wrapped = [
            IP, "netns", "exec", self.namespace,
            "unshare", "--uts", "--",
            "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname,
            *command,
        ]  # fmt: skip
        with open(log, "ab") as out:
            process = subprocess.Popen(
                wrapped,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a group of its own: the command and whatever it forks
                preexec_fn=_die_with_parent,
            )
        self.processes.append(process)
        return process

    def can_connect(self, port: int, timeout: float = 1.0) -> bool:
        """Whether a connection from inside the namespace to gateway:port opens within `timeout`."""
        probe = f"exec 3<>/dev/tcp/{self.gateway}/{port}"
        command = [IP, "netns", "exec", self.namespace, "timeout", str(timeout), "bash", "-c", probe]
        probed = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout + 10)
        return probed.returncode == 0

    def stop_processes(self, timeout: float = 20.0) -> None:
        """SIGTERM every process it started, wait up to `timeout`, then SIGKILL their groups."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # not reaped yet: the group id is still ours
                process.wait(10)
            if processes_in_group(process.pid):  # children left behind, still holding the group id
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(TimeoutError):  # teardown goes on; the namespace's deletion follows
                wait_for(lambda p=process: not processes_in_group(p.pid), timeout=10, what="the group to end")
        self.processes.clear()


class NetworkHosts:
    """`count` hosts (network namespaces) with forwarders to the root's loopback; a context manager."""

    def __init__(self, count: int = 2, *, ports: Iterable[int] = (), tagged_ports: Iterable[int] = ()):
        self.count = count
        self.ports, self.tagged_ports = list(ports), list(tagged_ports)
        self.prefix = self._free_prefix()
        self.subnet = self._free_subnet()
        self.hosts: list[Host] = []
        self._closed = False

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    @staticmethod
    def _free_prefix() -> str:
        taken = ip("-o", "link").stdout + ip("netns", "list").stdout
        for _ in range(100):
            prefix = f"dd{random.randrange(16**4):04x}"
            if prefix not in taken:
                return prefix
        raise RuntimeError("no free name prefix")

    @staticmethod
    def _free_subnet() -> ipaddress.IPv4Network:
        """A 10.x.0.0/16 no address or route of the root namespace falls in."""
        used = [
            ipaddress.ip_network(word, strict=False)
            for line in (ip("-4", "-o", "addr").stdout + ip("-4", "route", "show", "table", "all").stdout).splitlines()
            for word in line.split()
            if word[:1].isdigit() and word.count(".") == 3
        ]
        for _ in range(100):
            subnet = ipaddress.ip_network(f"10.{random.randrange(100, 250)}.0.0/16")
            if not any(subnet.overlaps(net) for net in used):
                return subnet
        raise RuntimeError("no free 10.x.0.0/16")

    def start(self) -> NetworkHosts:
        atexit.register(self.close)
        try:
            for i in range(1, self.count + 1):
                self._make_host(i)
        except BaseException:
            self.close()
            raise
        return self

    def _make_host(self, i: int) -> Host:
        base = self.subnet.network_address + (i << 8)
        host = Host(
            index=i,
            namespace=f"{self.prefix}-h{i}",
            root_veth=f"{self.prefix}-{i}r",
            host_veth=f"{self.prefix}-{i}h",
            gateway=str(base + 1),
            address=str(base + 2),
        )
        self.hosts.append(host)  # listed first: after a failure, close() deletes whatever was made
        ip("netns", "add", host.namespace)
        ip("link", "add", host.root_veth, "type", "veth", "peer", "name", host.host_veth, "netns", host.namespace)
        ip("addr", "add", f"{host.gateway}/30", "dev", host.root_veth)
        ip("link", "set", host.root_veth, "up")
        ip("-n", host.namespace, "link", "set", "lo", "up")
        ip("-n", host.namespace, "addr", "add", f"{host.address}/30", "dev", host.host_veth)
        ip("-n", host.namespace, "link", "set", host.host_veth, "up")
        ip("-n", host.namespace, "route", "add", "default", "via", host.gateway)
        for port in self.ports:
            host.forwarders[port] = Forwarder(host.gateway, port, (LOOPBACK, port))
        for port in self.tagged_ports:
            host.forwarders[port] = Forwarder(host.gateway, port, (LOOPBACK, port), source=self.tag(host))
        return host

    @staticmethod
    def tag(host: Host) -> str:
        """The address the host's tagged connections come from, as the servers see them."""
        return f"127.0.0.{10 + host.index}"

    def hold_replies(self, host: Host, ports: Iterable[int]) -> None:
        """What the servers on `ports` send to `host` waits in its forwarders; what it sends goes on."""
        for port in ports:
            host.forwarders[port].hold_replies()

    def cut(self, host: Host) -> None:
        """Pull the host's cable: the root side of its veth down. Held replies are let go (they
        now stall on the dead link, as a server's would). A server's connection ends at a forwarder,
        which stays up: it learns of the cut from its own timeouts (AMQP heartbeats), never from TCP."""
        ip("link", "set", host.root_veth, "down")
        host.cut_off = True
        for forwarder in host.forwarders.values():
            forwarder.pass_replies()

    def restore(self, host: Host, timeout: float = 10.0) -> None:
        """Plug it back: link up, and wait until the link has its carrier again."""
        ip("link", "set", host.root_veth, "up")
        operstate = Path(f"/sys/class/net/{host.root_veth}/operstate")
        wait_for(lambda: operstate.read_text().strip() == "up", timeout=timeout, what=f"{host.root_veth} up")
        host.cut_off = False

    def close(self) -> None:
        """Stop every process, every forwarder, delete every veth and namespace; idempotent."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts:
            with contextlib.suppress(Exception):
                host.stop_processes()
        for host in self.hosts:
            for forwarder in host.forwarders.values():
                with contextlib.suppress(Exception):
                    forwarder.stop()
            ip("link", "del", host.root_veth, check=False)  # deletes its peer too
            ip("netns", "del", host.namespace, check=False)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)

    def leftovers(self) -> list[str]:
        """Namespaces and links of this instance still present (none after close())."""
        names = ip("netns", "list").stdout + ip("-o", "link").stdout
        return sorted({word.split("@")[0].rstrip(":") for word in names.split() if word.startswith(self.prefix)})

    def __enter__(self) -> NetworkHosts:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()
