"""A correlation's timeline: in causal order, then by time (not in id order)."""

import uuid
from datetime import timedelta

from django.utils import timezone

from outbox.console.timeline import correlation_timeline
from outbox.models import OutboxMessage


def stored(story: dict, name: str, *, at: float, cause: str | None = None, stream: str = "ping:1") -> None:
    """A row of the story's outbox, `at` seconds after its start, its cause by name; rows get ids in call order."""
    when = story["start"] + timedelta(seconds=at)
    story[name] = OutboxMessage.objects.create(
        message_id=uuid.uuid4(),
        type="probe.pinged",
        version=1,
        source="probe",
        occurred_at=when,
        available_at=when,
        correlation_id=story["id"],
        causation_id=story[cause].message_id if cause else None,
        stream=stream,
        sequence=len(story) - 1,
        payload={"n": 1, "fail": {}},
        recipients=["probe_a"],
    )


def a_story() -> dict:
    return {"id": uuid.uuid4(), "start": timezone.now() - timedelta(hours=1)}


def test_each_event_follows_its_cause_and_the_earlier_goes_first_whatever_the_ids_say(db):
    story = a_story()
    # Published (ids) in this order: B's effect D committed before C, though C happened first.
    stored(story, "A", at=0)
    stored(story, "B", at=2, cause="A")
    stored(story, "D", at=3, cause="B")
    stored(story, "C", at=1, cause="A")
    stored(story, "E", at=4, cause="C")
    stored(story, "F", at=-1, cause="A")  # stamped by a host whose clock is behind: still after A

    names = {row.message_id: name for name, row in story.items() if isinstance(row, OutboxMessage)}
    order = [names[e["message_id"]] for e in correlation_timeline(story["id"])]

    assert order == ["A", "F", "C", "B", "D", "E"]

