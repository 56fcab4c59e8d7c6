"""Packs that wait for each other's locks: the kernel takes its own in one order (inbox rows by
message id, stream cursors by stream), so packs never deadlock on them; what handlers lock, in the
order their envelopes come, is theirs, and PostgreSQL breaks a deadlock there by rolling one back.

Each interleaving is forced: a step waits until PostgreSQL says (`pg_blocking_pids`) who waits for
whom. PostgreSQL rolls back the transaction whose deadlock_timeout (1 s by default) runs out first
while the cycle is there: the one that began to wait first, the other joining it within 50 ms."""

import logging
import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection, transaction
from django.db.models import F
from dramatiq.common import dq_name
from dramatiq.middleware import CurrentMessage
from outbox_tests.probe.models import Ping
from outbox_tests.relaying import taken_off
from outbox_tests.sessions import backend_pid, blocked_by
from outbox_tests.waiting import wait_until
from prometheus_client import REGISTRY

from outbox.core import subscriptions
from outbox.core.contracts import Reader
from outbox.core.subscriptions import queue_name, subscribe
from outbox.handling.dispatch import Outcome, dispatch
from outbox.handling.packs import dispatch_pack
from outbox.models import DeadLetter, InboxMessage, StreamCursor
from outbox.testing import an_envelope

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


class Locks(Reader):
    row: int = 0  # the Ping it updates, locking it until its transaction ends; 0: none
    after: str = ""  # what it waits for first: a step another handler has done, or "<pack> waits"
    then: str = ""  # the step it has done, once the row is locked


class LockingProbe:
    """probe_a's handler of probe.locks (and of probe.locks_in_order, ordered), told by its payload
    which row to lock, and when: each pack's backend is known by name, so a step can wait until
    PostgreSQL shows one pack waiting for the other."""

    def __init__(self):
        self.steps: set[str] = set()  # the steps done
        self.pids: dict[str, int] = {}
        self.runs: Counter[str] = Counter()
        self.seen: list[tuple[str, int]] = []

    def handle(self, message) -> None:
        self.runs[str(message.envelope.message_id)] += 1
        self.seen.append((message.envelope.stream, message.envelope.sequence))
        locks = message.payload
        if locks.after:
            wait_until(lambda: self.done(locks.after), what=locks.after)
        if locks.row:
            Ping.objects.filter(pk=locks.row).update(n=F("n") + 1)
        if locks.then:
            self.steps.add(locks.then)

    def done(self, step: str) -> bool:
        if step.endswith(" waits"):
            pack = step.removesuffix(" waits")
            return pack in self.pids and waiting(self.pids[pack])
        return step in self.steps

    def in_a_thread(self, name: str, work: Callable[[], object], failures: list) -> threading.Thread:
        """Run `work` on a connection of its own, known as `name`."""

        def run():
            try:
                self.pids[name] = backend_pid()
                work()
            except BaseException as error:  # noqa: BLE001 - the test reads it
                failures.append(error)
            finally:
                connection.close()

        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread


def waiting(pid: int) -> bool:
    """Whether PostgreSQL has the backend `pid` waiting for a lock another holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid])
        return cursor.fetchone()[0]


@pytest.fixture
def locking_probe():
    probe = LockingProbe()
    subscribe("probe_a", "probe.locks", reader=Locks)(probe.handle)
    subscribe("probe_a", "probe.locks_in_order", reader=Locks, ordered=True)(probe.handle)
    yield probe
    for event_type in ("probe.locks", "probe.locks_in_order"):
        subscriptions._subscriptions["probe_a"].pop(event_type, None)


def locks(stream: str, sequence: int, *, ordered: bool = False, **payload) -> dict:
    event_type = "probe.locks_in_order" if ordered else "probe.locks"
    return an_envelope(event_type, payload, stream=stream, sequence=sequence).model_dump(mode="json")


def cursor_of(stream: str) -> tuple[int, int, int]:
    cursor = StreamCursor.objects.get(subscriber="probe_a", stream=stream)
    return cursor.last_sequence, cursor.gaps, cursor.stale


def redone() -> float:
    return REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) or 0


def test_two_packs_naming_two_streams_in_opposite_orders_hold_them_in_one_order_behind_a_third(
    transactional_db, broker, locking_probe
):
    """S and T have cursors, and a third transaction holds S's. Pack A (S#1, T#1) waits for it; pack B
    (T#2, S#2) then waits too, for S, as it takes its streams in stream order, not in the order it
    names them: once S is free, A holds both and commits, then B. Taken in each pack's order, B held T
    and waited for S, A got S and waited for T: "deadlock detected", one pack failed whole."""
    for stream in ("S", "T"):
        StreamCursor.objects.create(subscriber="probe_a", stream=stream)
    held, free, failures = threading.Event(), threading.Event(), []

    def hold_s() -> None:
        with transaction.atomic():
            StreamCursor.objects.select_for_update().get(subscriber="probe_a", stream="S")
            held.set()
            free.wait(30)

    third = locking_probe.in_a_thread("third", hold_s, failures)
    assert held.wait(30)
    a = locking_probe.in_a_thread(
        "A",
        lambda: dispatch_pack(
            subscriber="probe_a", bodies=[locks("S", 1, ordered=True), locks("T", 1, ordered=True)], broker=broker
        ),
        failures,
    )
    wait_until(lambda: "A" in locking_probe.pids and blocked_by(locking_probe.pids["A"], locking_probe.pids["third"]))
    b = locking_probe.in_a_thread(
        "B",
        lambda: dispatch_pack(
            subscriber="probe_a", bodies=[locks("T", 2, ordered=True), locks("S", 2, ordered=True)], broker=broker
        ),
        failures,
    )
    wait_until(lambda: locking_probe.done("B waits"), what="pack B to wait")
    free.set()
    for thread in (third, a, b):
        thread.join(30)

    assert failures == []
    assert locking_probe.seen == [("S", 1), ("T", 1), ("T", 2), ("S", 2)]
    assert (cursor_of("S"), cursor_of("T")) == ((2, 0, 0), (2, 0, 0))


def deadlock(probe: LockingProbe, broker, a: list[dict], b: list[dict]) -> list[BaseException]:
    """Run packs A and B at once, their handlers locking rows as their payloads say; what escaped them."""
    failures: list[BaseException] = []
    threads = [
        probe.in_a_thread(
            name, lambda bodies=bodies: dispatch_pack(subscriber="probe_a", bodies=bodies, broker=broker), failures
        )
        for name, bodies in (("A", a), ("B", b))
    ]
    for thread in threads:
        thread.join(30)
    return failures


def crossed(x: int, y: int, *, ordered: bool = False) -> tuple[list[dict], list[dict]]:
    """Packs A and B whose handlers lock rows `x` and `y` in opposite orders, each row's second
    locker waiting until the other holds its first: A begins to wait first, and is rolled back."""
    a = [
        locks("SA", 1, ordered=ordered, row=x, then="A holds x"),
        locks("T", 1, ordered=ordered, row=y, after="B holds y"),
    ]
    b = [
        locks("SB", 1, ordered=ordered, row=y, after="A holds x", then="B holds y"),
        locks("SC", 1, ordered=ordered, row=x, after="A waits"),
    ]
    return a, b


@pytest.mark.rabbitmq
def test_an_envelope_postgresql_rolls_back_at_a_deadlock_between_handlers_is_retried_alone(
    transactional_db, broker, locking_probe, caplog
):
    """A locks x, then y; B locks y, then x. PostgreSQL rolls A back at its second envelope's update:
    that handler failed, as with any error, so A's pass is rolled back and done again without it (the
    first envelope applied again) and the envelope is retried alone, after a first retry's backoff,
    its line naming the deadlock. B commits whole; nothing escapes either pack, no letter."""
    x, y = Ping.objects.create(n=0).pk, Ping.objects.create(n=0).pk
    (a1, a2), b = crossed(x, y)
    before = redone()
    caplog.set_level(logging.INFO)

    failures = deadlock(locking_probe, broker, [a1, a2], b)

    assert failures == []
    assert redone() == before + 1
    assert [locking_probe.runs[e["message_id"]] for e in (a1, a2, *b)] == [2, 1, 1, 1]
    assert [Ping.objects.get(pk=pk).n for pk in (x, y)] == [2, 1]  # a1's and B's second; B's first
    received = {str(m) for m in InboxMessage.objects.filter(subscriber="probe_a").values_list("message_id", flat=True)}
    assert received == {e["message_id"] for e in (a1, *b)}
    [retry] = taken_off(broker, dq_name(queue_name("probe_a")))  # delayed: its backoff
    assert (retry.message_id, retry.options["retries"]) == (a2["message_id"], 1)
    [line] = [r.getMessage() for r in caplog.records if "will retry" in r.getMessage()]
    assert a2["message_id"] in line and line.endswith("OperationalError: deadlock detected")
    assert not DeadLetter.objects.exists()


@pytest.mark.rabbitmq
def test_an_ordered_deadlock_victim_is_stale_if_its_stream_moved_on(transactional_db, broker, locking_probe):
    """The same deadlock, of an ordered handler: A's T#1 is rolled back, and retried alone while A
    commits the rest, T's cursor still at 0. T#2, come meanwhile, is applied (a gap); T#1's retry
    then finds T past it and is dropped as stale, with no letter: its handler never takes effect.
    Alone, a T#1 that failed once would meet the same: an ordered stream does not wait for a retry."""
    x, y = Ping.objects.create(n=0).pk, Ping.objects.create(n=0).pk
    a, b = crossed(x, y, ordered=True)

    failures = deadlock(locking_probe, broker, a, b)

    assert failures == []
    assert (cursor_of("SA"), cursor_of("T")) == ((1, 0, 0), (0, 0, 0))  # T held by A, T#1 not applied
    [retry] = taken_off(broker, dq_name(queue_name("probe_a")))
    assert retry.message_id == a[1]["message_id"]
    assert dispatch(subscriber="probe_a", body=locks("T", 2, ordered=True)) is Outcome.PROCESSED
    token = CurrentMessage._MESSAGE.set(retry)  # as the worker that takes the retry has it
    try:
        outcome = dispatch(subscriber="probe_a", body=retry.args[0])
    finally:
        CurrentMessage._MESSAGE.reset(token)
    assert outcome is Outcome.STALE
    assert cursor_of("T") == (2, 1, 1)
    assert Ping.objects.get(pk=y).n == 1  # B's update alone: T#1's never happened
    assert not DeadLetter.objects.exists()
