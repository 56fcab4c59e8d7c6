"""What the workshop's rigs (a RabbitMQ cluster, network hosts) share: free ports away from the
machine's own servers, the processes of a process group, and children that die with their starter.
"""

import ctypes
import random
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

HOST = "127.0.0.1"

# Ports a rig never takes: the system's epmd, AMQP and distribution ports, and the range the
# system's rabbitmqctl calls listen on. Ports are drawn below the kernel's ephemeral range, so an outgoing
# connection never holds a stopped node's port when it starts again.
RESERVED_PORTS = {4369, 5672, 15672, 15692, 25672, *range(35672, 35683)}
PORT_RANGE = (20000, 32000)


def a_free_port(exclude: set[int] = frozenset(), span: int = 1) -> int:
    """A port (the first of `span` in a row) nobody listens on, on 127.0.0.1 and on all interfaces,
    outside the ephemeral range."""
    for _ in range(1000):
        first = random.randrange(PORT_RANGE[0], PORT_RANGE[1] - span)
        ports = range(first, first + span)
        if any(port in RESERVED_PORTS or port in exclude for port in ports):
            continue
        if all(_bindable(port, HOST) and _bindable(port, "0.0.0.0") for port in ports):
            return first
    raise RuntimeError("no free port found")


def _bindable(port: int, address: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
        return True


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((HOST, port)) == 0


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def processes_in_group(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose process group is `pgid`, from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def in_parallel(function: Callable[[int], object], indexes) -> None:
    """function(i) for each index, each in a thread; raises the first failure once all have ended."""
    failures: list[BaseException] = []

    def run(i):
        try:
            function(i)
        except BaseException as failure:
            failures.append(failure)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in indexes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the test process dies, even by SIGKILL (Linux)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def epmd_names(port: int) -> dict[str, int] | None:
    """The names an epmd on 127.0.0.1:port has registered, and their ports (EPMD NAMES_REQ);
    None when no epmd answers there. Read-only: it asks, it never registers."""
    try:
        with socket.create_connection((HOST, port), timeout=5) as conn:
            conn.sendall(b"\x00\x01n")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
    except OSError:
        return None
    names = {}
    for line in reply[4:].decode(errors="replace").splitlines():  # "name rig1 at port 22660"
        parts = line.split()
        if len(parts) == 5 and parts[0] == "name":
            names[parts[1]] = int(parts[4])
    return names
