"""What the system's processes cost while a figure was measured: CPU time and resident memory by
kind of process (web, relay, workers, PostgreSQL, RabbitMQ), read from Linux's /proc.

A rate says how fast; CPU per delivery says what it cost, and which kind of process to look at
first. Each process is measured from the first sample to the second; one that started in
between counts from its start, one that ended in between is not counted (none should: the
pools keep their connections and the bench stops its processes only after the second sample).
"""

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces): field 3 onwards."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants now alive."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def named(command: str) -> list[int]:
    """Every process whose command name is `command` (`postgres`, `beam.smp`)."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == command:
                found.append(int(comm.parent.name))
    return found


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User plus system CPU of each process still alive, its threads included."""
    seconds = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            seconds[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def resident_megabytes(pid: int) -> float:
    """Resident memory of a process and all its descendants."""
    total = 0
    for member in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


class CpuMeter:
    """CPU seconds spent by each kind of process between `start()` and `stop()`; `kinds` maps a
    kind to what lists its processes, asked again at each sample."""

    def __init__(self, kinds: dict[str, Callable[[], list[int]]]):
        self.kinds = kinds
        self.began: dict[str, dict[int, float]] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self.began = {kind: cpu_seconds(list_them()) for kind, list_them in self.kinds.items()}

    def stop(self) -> dict[str, float]:
        for kind, list_them in self.kinds.items():
            now, then = cpu_seconds(list_them()), self.began[kind]
            self.spent[kind] = sum(seconds - then.get(pid, 0.0) for pid, seconds in now.items())
        return self.spent
