"""A pack in one transaction: its envelopes share one BEGIN and COMMIT; one whose handler fails
is rolled back and takes the path it would have taken alone, and its neighbours commit without it
(outbox.handling.packs).

Which transaction a handler ran in is PostgreSQL's to say: the probe's handler, told to, reads
`txid_current()`."""

import logging
import threading
from collections import Counter
from collections.abc import Callable
from functools import partial

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from outbox_tests.probe import handlers as probe
from outbox_tests.probe.handlers import Pinged
from outbox_tests.probe.models import Effect, Ping
from outbox_tests.probe.services import current_transaction, lose_the_connection, record_effect, send
from outbox_tests.relaying import envelopes
from outbox_tests.sessions import backend_pid, blocked_by
from outbox_tests.waiting import wait_until
from prometheus_client import REGISTRY

from outbox.core import subscriptions
from outbox.core.dead_letters import record_dead_letter
from outbox.core.subscriptions import message_to, pack_of, subscribe
from outbox.handling.dispatch import dispatch
from outbox.handling.packs import dispatch_pack
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, StreamCursor
from outbox.testing import an_envelope

pytestmark = pytest.mark.integration


TELL = {"probe_a": "tell_transaction"}


def transactions(sent: list[dict]) -> list[str | None]:
    """The transaction each envelope's handler last ran in, in their order."""
    return [probe.transaction_of.get(envelope["message_id"]) for envelope in sent]


@pytest.mark.postgres
def test_the_envelopes_of_a_pack_are_committed_in_one_transaction(worker, broker):
    sent = envelopes(4, fail=TELL)
    broker.enqueue(pack_of([message_to("probe_a", envelope) for envelope in sent]))

    wait_until(lambda: Effect.objects.count() == 4, what="the pack's four envelopes to take effect")
    assert len(set(transactions(sent))) == 1 and None not in transactions(sent)


@pytest.mark.postgres
def test_with_pack_transactions_turned_off_each_envelope_has_a_transaction_of_its_own(worker, broker, settings):
    settings.OUTBOX_PACK_TRANSACTION = False
    sent = envelopes(3, fail=TELL)
    broker.enqueue(pack_of([message_to("probe_a", envelope) for envelope in sent]))

    wait_until(lambda: Effect.objects.count() == 3, what="the pack's three envelopes to take effect")
    assert len(set(transactions(sent))) == 3


@pytest.mark.postgres
def test_an_envelope_failing_in_a_pack_is_rolled_back_alone(worker, broker, settings):
    """Its handler wrote a row, then caught a statement the database refused: the row is rolled back,
    its dead letter (no retries left) is kept, and the two around it commit with the letter."""
    settings.OUTBOX_MAX_RETRIES = 0
    redone = REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) or 0
    first, refused, last = (
        envelopes(1, fail=TELL),
        envelopes(1, fail={"probe_a": "swallow_sql"}),
        envelopes(1, fail=TELL),
    )
    pings_before = Ping.objects.count()
    broker.enqueue(pack_of([message_to("probe_a", envelope) for envelope in [*first, *refused, *last]]))

    letter = wait_until(lambda: DeadLetter.objects.first(), what="the refused envelope's dead letter")
    assert (str(letter.message_id), letter.reason) == (refused[0]["message_id"], "handler_error")
    assert "rolled its transaction back" in letter.error  # WorkRolledBack's
    wait_until(lambda: Effect.objects.count() == 2, what="its neighbours to take effect")
    assert Ping.objects.count() == pings_before  # the refused handler's own write was rolled back
    assert not InboxMessage.objects.filter(message_id=refused[0]["message_id"]).exists()
    assert len(set(transactions([*first, *last]))) == 1
    # The transaction was rolled back at the refusal and the pack handled again without that handler:
    # the envelope before it ran twice, the refused one and the one after it once.
    assert [probe.runs[e["message_id"]] for e in [*first, *refused, *last]] == [2, 1, 1]
    assert REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) == redone + 1


def test_an_envelope_twice_in_one_pack_takes_effect_once(worker, broker):
    twice, other = envelopes(2)
    broker.enqueue(pack_of([message_to("probe_a", envelope) for envelope in [twice, other, twice]]))

    wait_until(
        lambda: InboxMessage.objects.filter(message_id=twice["message_id"], duplicates=1).exists(),
        what="the second copy to be skipped as a duplicate",
    )
    assert sorted(Effect.objects.values_list("n", flat=True)) == [0, 1]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("carelessly", "times_sent"),
    [(False, 1), (True, 2)],
    ids=["outside effects declared: sent once", "not declared: sent again"],
)
def test_a_rolled_back_neighbour_never_repeats_a_declared_outside_effect(
    worker, broker, caplog, carelessly, times_sent
):
    """probe_b sends something out of the database, then its neighbour in the pack has the database
    end the session: the shared transaction is gone, and the pack's envelopes are handled again in a
    new one. A handler declared with `outside_effects` was committed alone before the neighbour
    began, and is not run again; one not declared was rolled back with the rest, and sends again
    (why the option exists). Either way what was rolled back was never logged as processed."""
    n = 1_000 + carelessly
    send(n=n, carelessly=carelessly)
    sending = OutboxMessage.objects.get(stream=f"send:{n}").envelope()
    breaking = envelopes(1, fail={"probe_b": "lose_connection_once"})[0]
    caplog.set_level(logging.INFO, logger="outbox.handling.dispatch")
    broker.enqueue(pack_of([message_to("probe_b", envelope) for envelope in [sending, breaking]]))

    def processed():  # said once committed: the worker's thread logs just after the inbox rows show
        return [r for r in caplog.records if getattr(r, "outcome", "") == "processed"]

    wait_until(
        lambda: InboxMessage.objects.filter(subscriber="probe_b").count() == 2 and len(processed()) >= 2,
        timeout=30,
        what="both envelopes to be processed and said so, the one that lost the connection retried alone",
    )
    assert probe.sent_outside[n] == times_sent
    assert sorted(r.message_id for r in processed()) == sorted([sending["message_id"], breaking["message_id"]])
    assert settings.OUTBOX_PACK_TRANSACTION  # the default: the repeat above is the shared transaction's


@pytest.mark.postgres
def test_the_inbox_rows_of_a_pack_are_written_in_one_statement(transactional_db, broker):
    """Outside a worker (no time limit), each envelope would otherwise write its own row."""
    sent = envelopes(4)
    inbox = InboxMessage._meta.db_table

    with CaptureQueriesContext(connection) as statements:
        dispatch_pack(subscriber="probe_a", bodies=sent, broker=broker)

    assert sum(f'INSERT INTO "{inbox}"' in q["sql"] for q in statements.captured_queries) == 1
    assert InboxMessage.objects.filter(subscriber="probe_a", duplicates=0).count() == Effect.objects.count() == 4


@pytest.mark.postgres
def test_an_envelope_refused_after_its_inbox_row_was_written_with_the_packs_keeps_no_row(transactional_db, broker):
    """Its payload does not fit its handler's reader: a dead letter, no inbox row (which would
    have said it was processed), and its neighbours processed."""
    first, refused, last = envelopes(3)
    refused = {**refused, "payload": {"n": "not a number"}}

    dispatch_pack(subscriber="probe_a", bodies=[first, refused, last], broker=broker)

    letter = DeadLetter.objects.get()
    assert (str(letter.message_id), letter.reason) == (refused["message_id"], "invalid_payload")
    assert not InboxMessage.objects.filter(message_id=refused["message_id"]).exists()
    assert sorted(Effect.objects.values_list("n", flat=True)) == [0, 2]


@pytest.mark.postgres
def test_a_replayed_letter_of_an_envelope_processed_in_a_pack_is_closed(transactional_db, broker):
    replayed, other = envelopes(2)
    record_dead_letter(subscriber="probe_a", body=replayed, reason="handler_error", error=RuntimeError("earlier"))
    DeadLetter.objects.update(status=DeadLetter.Status.REPLAYED)

    dispatch_pack(subscriber="probe_a", bodies=[other, replayed], broker=broker)

    assert DeadLetter.objects.get().status == DeadLetter.Status.PROCESSED
    assert Effect.objects.count() == 2


@pytest.fixture
def failing_first():
    """probe_a's handler of probe.flaky, which fails the first time it runs for a message and takes
    effect the next: how many times it ran, by message id."""
    runs: Counter[str] = Counter()

    def handle(message) -> None:
        envelope = message.envelope
        runs[str(envelope.message_id)] += 1
        if runs[str(envelope.message_id)] == 1:
            raise probe.Misbehaving("probe.flaky fails its first run")
        record_effect(subscriber="probe_a", message_id=envelope.message_id, type=envelope.type, n=message.payload.n)

    subscribe("probe_a", "probe.flaky", reader=Pinged)(handle)
    yield runs
    subscriptions._subscriptions["probe_a"].pop("probe.flaky", None)


def flaky(n: int) -> dict:
    return an_envelope("probe.flaky", {"n": n}).model_dump(mode="json")


def test_a_first_copys_letter_is_closed_when_its_second_copy_is_processed(
    transactional_db, broker, failing_first, settings
):
    """The first copy fails with no retries left and is dead-lettered; the second is processed in the
    same pass, as a copy come alone after the letter would be, and closes it. Its inbox row, written
    before the pass that wrote the letter, said it had none, and the letter stayed open: one to act
    on for a message processed."""
    settings.OUTBOX_MAX_RETRIES = 0
    twice, other = flaky(1), envelopes(1)[0]

    dispatch_pack(subscriber="probe_a", bodies=[twice, other, twice], broker=broker)

    letter = DeadLetter.objects.get()
    assert (str(letter.message_id), letter.status) == (twice["message_id"], DeadLetter.Status.PROCESSED)
    assert failing_first[twice["message_id"]] == 2
    assert Effect.objects.filter(message_id=twice["message_id"]).count() == 1


@pytest.mark.parametrize(
    ("retries", "said"),
    [
        (5, lambda record: "will retry" in record.getMessage()),
        (0, lambda record: record.getMessage().startswith("dead-lettered") and record.exc_info),
    ],
    ids=["a retry's line", "a letter's traceback"],
)
def test_what_a_rolled_back_pass_decided_is_logged_once_by_the_pass_that_commits(
    transactional_db, broker, caplog, settings, retries, said
):
    """The first envelope fails, and the pass done again without its handler takes its error's path
    (its retry, or its letter) until the third fails too: that pass is rolled back and done once more.
    What the first's path logged in the rolled-back pass was logged again by the next: two lines of
    "attempt 1" for one retry, two tracebacks for one letter."""
    settings.OUTBOX_MAX_RETRIES = retries
    caplog.set_level(logging.DEBUG)
    first, neighbour, third = (
        envelopes(1, fail={"probe_a": "always"})[0],
        envelopes(1)[0],
        envelopes(1, fail={"probe_a": "always"})[0],
    )

    dispatch_pack(subscriber="probe_a", bodies=[first, neighbour, third], broker=broker)

    records = [r for r in caplog.records if r.name.startswith("outbox.") and said(r)]
    assert [sum(e["message_id"] in r.getMessage() for r in records) for e in (first, third)] == [1, 1]
    assert len(records) == 2
    # Said after the handling, each still names its message for structured logs (log_context).
    assert {getattr(r, "message_id", None) for r in records} == {first["message_id"], third["message_id"]}
    assert Effect.objects.filter(message_id=neighbour["message_id"]).count() == 1


@pytest.mark.postgres
def test_a_pack_whose_handlers_all_fail_is_handled_again_twice_at_most_not_once_a_failure(
    transactional_db, broker, settings
):
    """A dependency down fails every envelope: after the second failure the rest of the pack is
    handled one by one, each its own transaction, instead of one more pass for each failure."""
    settings.OUTBOX_MAX_RETRIES = 0
    sent = envelopes(6, fail={"probe_a": "always"})
    redone = REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) or 0

    dispatch_pack(subscriber="probe_a", bodies=sent, broker=broker)

    assert DeadLetter.objects.filter(reason="handler_error").count() == 6
    assert [probe.runs[e["message_id"]] for e in sent] == [1] * 6  # no failed handler run twice
    assert REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) == redone + 2


class OrderedProbe:
    """An ordered handler of probe_a's for these tests, told what to do by its ping's `n`: 0 holds
    until another thread's dispatch is waiting on this one's locks (or has begun a handler of its
    own, which it should not be able to), 1 only says it began, 2 says so and then fails once that
    other thread waits, 3 fails at once, 4 has PostgreSQL end its session the first time. Every
    handler asks for its stream and number to be noted once its transaction commits, and says
    which transaction it ran in."""

    def __init__(self):
        self.seen: list[tuple[str, int]] = []
        self.committed: list[tuple[str, int]] = []  # what on_commit ran
        self.transactions: list[str] = []
        self.other_pid: list[int] = []  # the other thread's backend, once it has one
        self.began, self.other_began = threading.Event(), threading.Event()
        self.lost = False

    def handle(self, message) -> None:
        here = (message.envelope.stream, message.envelope.sequence)
        self.seen.append(here)
        transaction.on_commit(partial(self.committed.append, here))
        if connection.vendor == "postgresql":
            self.transactions.append(current_transaction())
        n = message.payload.n
        if n == 0:
            self.began.set()
            wait_until(lambda: self.other_began.is_set() or self.other_waits_on_me(), what="the other pack")
        elif n == 1:
            self.other_began.set()
        elif n == 2:
            self.began.set()
            wait_until(self.other_waits_on_me, what="the lone event to wait for this pack's streams")
            raise probe.Misbehaving("probe.ordered told to fail")
        elif n == 3:
            raise probe.Misbehaving("probe.ordered told to fail at once")
        elif n == 4 and not self.lost:
            self.lost = True
            lose_the_connection()

    def other_waits_on_me(self) -> bool:
        return bool(self.other_pid) and blocked_by(self.other_pid[0], backend_pid())


@pytest.fixture
def ordered_probe():
    ordered_handler = OrderedProbe()
    subscribe("probe_a", "probe.ordered", reader=Pinged, ordered=True)(ordered_handler.handle)
    yield ordered_handler
    subscriptions._subscriptions["probe_a"].pop("probe.ordered", None)


def ordered(stream: str, sequence: int, n: int = 9) -> dict:
    return an_envelope("probe.ordered", {"n": n}, stream=stream, sequence=sequence).model_dump(mode="json")


def in_another_thread(handler: OrderedProbe, work: Callable[[], object], failures: list) -> threading.Thread:
    """Run `work` on a connection of its own, its backend's pid told to the handler first."""

    def run():
        try:
            handler.other_pid.append(backend_pid())
            work()
        except BaseException as error:  # noqa: BLE001 - the test reads it
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def cursor_of(stream: str) -> tuple[int, int, int]:
    cursor = StreamCursor.objects.get(subscriber="probe_a", stream=stream)
    return cursor.last_sequence, cursor.gaps, cursor.stale


@pytest.mark.postgres
def test_an_ordered_handlers_envelopes_of_several_streams_share_the_packs_transaction(
    transactional_db, broker, ordered_probe
):
    dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1), ordered("T", 1), ordered("S", 2)], broker=broker)

    assert ordered_probe.seen == [("S", 1), ("T", 1), ("S", 2)]
    assert len(set(ordered_probe.transactions)) == 1
    assert (cursor_of("S"), cursor_of("T")) == ((2, 0, 0), (1, 0, 0))


@pytest.mark.postgres
def test_two_ordered_packs_of_opposite_stream_orders_never_deadlock(transactional_db, broker, ordered_probe):
    """The first pack holds S and T before its first handler runs, so the second, T then S, waits
    for it to commit. Holding each stream's cursor only as its envelope came, each pack held one and
    waited for the other's: PostgreSQL broke the deadlock by rolling one back, and on its second pass
    its first event was stale behind the other pack's, dropped where alone it is applied."""
    failures: list[BaseException] = []
    redone = REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) or 0
    first = in_another_thread(
        ordered_probe,
        lambda: dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1, n=0), ordered("T", 1)], broker=broker),
        failures,
    )
    wait_until(ordered_probe.began.is_set, what="the first pack's first handler")
    ordered_probe.other_pid.clear()
    second = in_another_thread(
        ordered_probe,
        lambda: dispatch_pack(subscriber="probe_a", bodies=[ordered("T", 2, n=1), ordered("S", 2)], broker=broker),
        failures,
    )
    first.join(30)
    second.join(30)

    assert failures == []
    assert (
        REGISTRY.get_sample_value("outbox_pack_transactions_redone_total", {"subscriber": "probe_a"}) or 0
    ) == redone  # no deadlock broken, no pass rolled back
    assert ordered_probe.seen == [("S", 1), ("T", 1), ("T", 2), ("S", 2)]
    assert (cursor_of("S"), cursor_of("T")) == ((2, 0, 0), (2, 0, 0))


@pytest.mark.postgres
def test_a_pass_rolled_back_keeps_its_streams_so_no_later_event_of_them_is_applied_in_between(
    transactional_db, broker, ordered_probe, settings
):
    """S#1 is applied; its neighbour on U fails once S#2, come alone, waits for S. The pass is rolled
    back to where the pack held its streams, not with its transaction: S#1 is applied again first and
    S#2 after. Rolled back with the transaction, S let go, S#2 took it and S#1 was found stale."""
    settings.OUTBOX_MAX_RETRIES = 0  # the failed envelope's letter, rather than its retry
    failures: list[BaseException] = []
    pack = in_another_thread(
        ordered_probe,
        lambda: dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1), ordered("U", 1, n=2)], broker=broker),
        failures,
    )
    wait_until(ordered_probe.began.is_set, what="the pack's failing handler to begin")
    ordered_probe.other_pid.clear()
    alone = in_another_thread(ordered_probe, lambda: dispatch(subscriber="probe_a", body=ordered("S", 2)), failures)
    pack.join(30)
    alone.join(30)

    assert failures == []
    assert cursor_of("S") == (2, 0, 0)  # S#1, then S#2: none stale
    assert DeadLetter.objects.get().reason == "handler_error"  # U#1's, the cursor on U rolled back with it
    assert not StreamCursor.objects.filter(stream="U", last_sequence__gt=0).exists()


def test_a_rolled_back_pass_on_commit_never_runs_and_its_neighbours_runs_once(
    transactional_db, broker, ordered_probe, settings
):
    """S#1's handler runs in both passes, U#1's in the first, which is rolled back to the pack's
    savepoint: Django's on_commit callbacks of the rolled-back pass go with it, on either database.
    A savepoint Django's `atomic` does not know of kept them: [S#1, U#1, S#1]."""
    settings.OUTBOX_MAX_RETRIES = 0
    dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1), ordered("U", 1, n=3)], broker=broker)

    assert ordered_probe.seen == [("S", 1), ("U", 1), ("S", 1)]
    assert ordered_probe.committed == [("S", 1)]
    assert cursor_of("S") == (1, 0, 0)
    assert DeadLetter.objects.get().reason == "handler_error"


@pytest.mark.postgres
def test_a_lone_copy_of_a_packed_message_is_a_duplicate_never_a_deadlock(
    transactional_db, broker, ordered_probe, settings
):
    """A copy of S#1 comes alone (the sweep's, a relay's second send) while its pack handles it: it
    waits on the row the pack wrote, as the pack writes its rows before it holds its streams (the
    order a message alone takes them in). Then U#1 fails: the pass goes back to the savepoint with
    the rows and the streams still held. Holding S before writing its rows, and writing them again in
    each pass, the pack waited on the copy's row while the copy waited on S: "deadlock detected"."""
    settings.OUTBOX_MAX_RETRIES = 0
    failures: list[BaseException] = []
    s1 = ordered("S", 1, n=0)
    pack = in_another_thread(
        ordered_probe,
        lambda: dispatch_pack(subscriber="probe_a", bodies=[s1, ordered("U", 1, n=3)], broker=broker),
        failures,
    )
    wait_until(ordered_probe.began.is_set, what="S#1's handler in the pack")
    ordered_probe.other_pid.clear()
    alone = in_another_thread(ordered_probe, lambda: dispatch(subscriber="probe_a", body=s1), failures)
    pack.join(30)
    alone.join(30)

    assert failures == []
    assert cursor_of("S") == (1, 0, 0)
    assert InboxMessage.objects.get(message_id=s1["message_id"]).duplicates == 1  # the copy, skipped
    assert DeadLetter.objects.get().message_id != s1["message_id"]  # U#1's alone


@pytest.mark.postgres
def test_a_stream_no_cursor_can_be_made_for_fails_its_envelope_alone_not_the_pack(
    transactional_db, broker, ordered_probe, settings
):
    """A stream longer than the cursor's column (a foreign or corrupt body: publish() refuses one)
    is left out of what the pack holds; its envelope fails in its own turn, unprocessable, and its
    neighbour commits. Held with the others, the hold's DataError failed the whole pack."""
    settings.OUTBOX_MAX_RETRIES = 0
    dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1), ordered("X" * 201, 1)], broker=broker)

    assert cursor_of("S") == (1, 0, 0)
    assert DeadLetter.objects.get().reason == "unprocessable"


@pytest.mark.postgres
def test_an_envelope_whose_stream_holds_a_nul_fails_alone_and_its_letter_keeps_what_it_can(
    transactional_db, broker, ordered_probe
):
    """PostgreSQL's text and jsonb refuse a NUL: no cursor can be made for such a stream, so the pack
    holds its other streams and the envelope fails in its own turn, unprocessable. Its letter keeps
    the envelope with each NUL replaced (U+FFFD), as a letter of .XQ does. Held with the others, the
    hold's DataError failed the whole pack; kept as it was, the letter could not be written
    ("unsupported Unicode escape sequence") and the envelope was retried for nothing."""
    dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1), ordered("X\x00Y", 1)], broker=broker)

    assert cursor_of("S") == (1, 0, 0)
    letter = DeadLetter.objects.get()
    assert (letter.reason, letter.envelope["stream"], letter.status) == ("unprocessable", "X\ufffdY", "open")
    assert "NUL" in letter.error


@pytest.mark.postgres
def test_a_pack_holds_a_stream_whose_cursor_exists_already_so_an_event_come_alone_waits_for_it(
    transactional_db, broker, ordered_probe
):
    """S's cursor is at #1. The pack [U#1, S#2] holds S before U#1's handler runs, and S#3, come alone
    meanwhile, waits for the pack: S#2 is applied, then S#3. Were an existing cursor left unlocked by
    the hold (a new one's insert locks it anyway), S#3 went first and S#2 was dropped as stale."""
    StreamCursor.objects.create(subscriber="probe_a", stream="S", last_sequence=1)
    failures: list[BaseException] = []
    pack = in_another_thread(
        ordered_probe,
        lambda: dispatch_pack(subscriber="probe_a", bodies=[ordered("U", 1, n=0), ordered("S", 2)], broker=broker),
        failures,
    )
    wait_until(ordered_probe.began.is_set, what="U#1's handler in the pack")
    ordered_probe.other_pid.clear()
    s3 = ordered("S", 3, n=1)
    alone = in_another_thread(ordered_probe, lambda: dispatch(subscriber="probe_a", body=s3), failures)
    pack.join(30)
    alone.join(30)

    assert failures == []
    assert ordered_probe.seen == [("U", 1), ("S", 2), ("S", 3)]
    assert cursor_of("S") == (3, 0, 0)


@pytest.mark.postgres
def test_a_pass_that_loses_its_session_is_redone_holding_its_streams_again(
    transactional_db, broker, ordered_probe, settings
):
    """The savepoint went with the session: the pack takes a new connection, writes its rows and holds
    its streams again, and the envelope whose handler ended the session is retried alone."""
    settings.OUTBOX_MAX_RETRIES = 0
    dispatch_pack(subscriber="probe_a", bodies=[ordered("S", 1), ordered("U", 1, n=4), ordered("S", 2)], broker=broker)

    assert cursor_of("S") == (2, 0, 0)
    assert ordered_probe.committed == [("S", 1), ("S", 2)]
    assert DeadLetter.objects.get().reason == "handler_error"  # U#1's: its handler ended the session
