"""A correlation's timeline: in causal order, then by time (not in id order), and its table's rows."""

import uuid
from datetime import timedelta

from django.template.loader import render_to_string
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


def test_the_table_names_a_cause_by_its_row_and_keeps_each_stream_to_one_line(db):
    story = a_story()
    outside = uuid.uuid4()  # a cause in another story
    stream = "ping:0b6f1c2a-5d1e-4c3b-9a7f-2e4d6c8b0a1f"
    stored(story, "A", at=0, stream=stream)
    stored(story, "B", at=1, cause="A")
    stored(story, "C", at=2, cause="B")
    OutboxMessage.objects.filter(pk=story["C"].pk).update(causation_id=outside)
    stored(story, "D", at=3, cause="B")

    html = render_to_string("admin/outbox/timeline_table.html", {"events": correlation_timeline(story["id"])})

    causes = [cell.split("</td>")[0] for cell in html.split('<td class="cause">')[1:]]
    assert causes[0] == "<small>(origin)</small>"
    assert causes[1] == '<a style="white-space: nowrap" href="#timeline-row-1">#1</a>'
    assert causes[2] == f"<small>{outside}</small>"  # not in the table: its id
    assert causes[3] == '<a style="white-space: nowrap" href="#timeline-row-2">#2</a>'
    assert [f'<tr id="timeline-row-{n}">' in html for n in range(1, 5)] == [True] * 4
    assert f'<span title="{stream}" style="white-space: nowrap">ping:0b6f1c2a…</span>' in html
    assert '<span title="ping:1" style="white-space: nowrap">ping:1</span>' in html
