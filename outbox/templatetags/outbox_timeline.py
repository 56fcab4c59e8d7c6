"""`{% timeline_rows events as rows %}`: a timeline's events as the rows of its table."""

from django import template

register = template.Library()
KEPT = 8  # characters of a stream's id kept after its last separator


@register.simple_tag
def timeline_rows(events) -> list[dict]:
    """Each event with its row number, its cause's (None: an origin, or a cause outside the table)
    and its stream shortened to one line."""
    numbers = {_get(e, "message_id"): n for n, e in enumerate(events, start=1)}
    return [
        {
            "number": n,
            "event": e,
            "cause": numbers.get(_get(e, "causation_id")) if _get(e, "causation_id") else None,
            "stream": short_stream(str(_get(e, "stream"))),
        }
        for n, e in enumerate(events, start=1)
    ]


def short_stream(stream: str) -> str:
    """Its name and the start of the id after its last separator: `name:0b6f1c2a…`."""
    cut = max(stream.rfind(":"), stream.rfind("/")) + 1
    if len(stream) - cut <= KEPT + 1:
        return stream
    return stream[: cut + KEPT] + "…"


def _get(event, key: str):
    return event[key] if isinstance(event, dict) else getattr(event, key)
