"""One line for each retry, the traceback once with the dead letter: what an operator reads when a
downstream system breaks and hundreds of messages fail for one cause."""

import logging

import pytest
from django.conf import settings
from outbox_tests.probe.models import Effect
from outbox_tests.relaying import envelopes
from outbox_tests.waiting import wait_until

from outbox.core.subscriptions import message_to
from outbox.models import DeadLetter

pytestmark = pytest.mark.integration


def retry_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "outbox.handling.dispatch" and "will retry" in r.getMessage()]


def with_tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info or r.exc_text]


def test_a_handler_that_fails_and_will_be_retried_logs_one_line_and_no_traceback(worker, broker, caplog):
    caplog.set_level(logging.DEBUG)
    sent = envelopes(1, fail={"probe_a": "once"})[0]
    broker.enqueue(message_to("probe_a", sent))

    wait_until(lambda: Effect.objects.filter(message_id=sent["message_id"]).exists(), what="the retry to succeed")
    [line] = retry_lines(caplog)
    assert line.levelname == "WARNING"
    text = line.getMessage()
    assert text.startswith(f"probe_a will retry probe.pinged message={sent['message_id']} ")
    assert f"(attempt 1 of {settings.OUTBOX_MAX_RETRIES + 1})" in text
    assert text.endswith("ms: Misbehaving: probe_a told to fail once")
    assert (line.attempt, line.delay_ms >= 0) == (1, True)
    assert with_tracebacks(caplog) == []  # Dramatiq's own "unhandled exception" line, with its traceback, is gone
    assert not [r for r in caplog.records if r.getMessage().startswith("Retrying message")]  # nor said twice


def test_the_traceback_is_logged_once_with_the_dead_letter_and_kept_on_it(worker, broker, caplog, settings):
    settings.OUTBOX_MAX_RETRIES = 1
    caplog.set_level(logging.DEBUG)
    sent = envelopes(1, fail={"probe_a": "always"})[0]
    broker.enqueue(message_to("probe_a", sent))

    letter = wait_until(lambda: DeadLetter.objects.first(), timeout=30, what="the dead letter after one retry")
    assert len(retry_lines(caplog)) == 1
    [logged] = wait_until(lambda: with_tracebacks(caplog), what="the dead letter's log line")
    assert logged.getMessage().startswith(f"dead-lettered probe.pinged {sent['message_id']} for probe_a: handler_error")
    assert "Misbehaving" in logged.exc_text or "Misbehaving" in str(logged.exc_info[1])
    assert "Traceback" in letter.traceback and "Misbehaving: probe_a told to fail always" in letter.traceback
