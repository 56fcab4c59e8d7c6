import threading
from collections import Counter
from uuid import UUID

from django.db import IntegrityError, transaction
from dramatiq.middleware import CurrentMessage

from outbox.core.contracts import Reader
from outbox.core.dead_letters import Rejected
from outbox.core.subscriptions import Received, subscribe
from outbox_tests.probe.models import Outage
from outbox_tests.probe.services import (
    Exploded,
    current_role,
    current_transaction,
    insert_a_key_already_there,
    lose_the_connection,
    read_another_contexts_table,
    record_effect,
    refuse_inside_a_service,
    run_a_statement_that_fails,
)

SWALLOWED_STATEMENTS = {"swallow_insert_row": insert_a_key_already_there, "swallow_sql": run_a_statement_that_fails}


class Pinged(Reader):
    n: int
    fail: dict[str, str] = {}


class Echoed(Reader):
    n: int


class Misbehaving(Exception):
    pass


# What probe_b sent out of the database, by n: a rollback does not take it back.
sent_outside: Counter[int] = Counter()
# How many times probe_a's handler ran for each message, whatever became of its work.
runs: Counter[str] = Counter()
# The transaction (PostgreSQL's top-level id, whatever savepoint it ran in) each message's handler
# ran in, for the pings told to "tell_transaction".
transaction_of: dict[str, str] = {}
# The role each message's handler ran under, for the pings told to "tell_role"; and what it asked
# to run once its transaction committed, for those told to "tell_role_on_commit".
role_of: dict[str, str] = {}
role_on_commit_of: dict[str, str] = {}
# The pings whose handler ended its own session, once each.
_lost_once: set[UUID] = set()

# How many "slow" handlers ran at once in this process (the limits test reads it).
_running, running_high_water, _running_lock = [0], [0], threading.Lock()


def _misbehave(subscriber: str, mode: str | None) -> None:
    retries = (
        CurrentMessage.get_current_message().options.get("retries", 0) if CurrentMessage.get_current_message() else 0
    )
    if mode == "always" or (mode == "once" and retries == 0):
        raise Misbehaving(f"{subscriber} told to fail {mode}")
    if mode == "outage" and Outage.objects.filter(subscriber=subscriber).exists():
        raise Misbehaving(f"{subscriber} is in an outage")
    if mode == "slow":
        with _running_lock:
            _running[0] += 1
            running_high_water[0] = max(running_high_water[0], _running[0])
        try:
            threading.Event().wait(0.1)
        finally:
            with _running_lock:
                _running[0] -= 1
    if mode == "stuck":  # longer than any time limit a test sets; short waits, so the limit can interrupt
        for _ in range(100):
            threading.Event().wait(0.05)
    if mode == "reject":
        raise Rejected("probe_refused", f"{subscriber} refuses this ping")


@subscribe("probe_a", "probe.pinged", reader=Pinged)
def a_on_pinged(message: Received[Pinged]) -> None:
    runs[str(message.envelope.message_id)] += 1
    mode = message.payload.fail.get("probe_a")
    if mode == "swallow":
        try:
            refuse_inside_a_service(n=message.payload.n)
        except Exploded:
            return  # the trap: a handler that catches its service's refusal and returns as if done
    if mode in SWALLOWED_STATEMENTS:
        try:
            SWALLOWED_STATEMENTS[mode](n=message.payload.n)
        except IntegrityError:
            return  # the same trap, with a statement written by hand that the database refused
    if mode == "tell_transaction":
        transaction_of[str(message.envelope.message_id)] = current_transaction()
    if mode == "tell_role":
        role_of[str(message.envelope.message_id)] = current_role()
    if mode == "tell_role_on_commit":
        told = str(message.envelope.message_id)
        transaction.on_commit(lambda: role_on_commit_of.__setitem__(told, current_role()))
    if mode == "reach_across":
        read_another_contexts_table()
    _misbehave("probe_a", message.payload.fail.get("probe_a"))
    record_effect(
        subscriber="probe_a",
        message_id=message.envelope.message_id,
        type=message.envelope.type,
        n=message.payload.n,
        echo=message.payload.fail.get("probe_a") == "echo",
    )


@subscribe("probe_b", "probe.pinged", reader=Pinged)
def b_on_pinged(message: Received[Pinged]) -> None:
    if message.payload.fail.get("probe_b") == "lose_connection_once" and message.envelope.message_id not in _lost_once:
        _lost_once.add(message.envelope.message_id)
        lose_the_connection()
    _misbehave("probe_b", message.payload.fail.get("probe_b"))
    record_effect(
        subscriber="probe_b",
        message_id=message.envelope.message_id,
        type=message.envelope.type,
        n=message.payload.n,
    )


@subscribe("probe_b", "probe.echoed", reader=Echoed)
def b_on_echoed(message: Received[Echoed]) -> None:
    """Echo every echo back: an endless chain the hops bound must cut."""
    record_effect(
        subscriber="probe_b",
        message_id=message.envelope.message_id,
        type=message.envelope.type,
        n=message.payload.n,
        echo=True,
    )


@subscribe("probe_a", "probe.undo_requested", reader=Pinged, compensation=True)
def a_undo(message: Received[Pinged]) -> None:
    """A compensation: its failures are reported as compensation_failed."""
    _misbehave("probe_a", message.payload.fail.get("probe_a"))
    record_effect(
        subscriber="probe_a", message_id=message.envelope.message_id, type=message.envelope.type, n=message.payload.n
    )


class Sent(Reader):
    n: int


@subscribe("probe_b", "probe.sent", reader=Sent, outside_effects=True)
def b_on_sent(message: Received[Sent]) -> None:
    sent_outside[message.payload.n] += 1


@subscribe("probe_b", "probe.sent_carelessly", reader=Sent)
def b_on_sent_carelessly(message: Received[Sent]) -> None:
    """The same, its outside effect not declared: a neighbour's failure can have it sent again."""
    sent_outside[message.payload.n] += 1
