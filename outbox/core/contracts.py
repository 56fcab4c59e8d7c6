"""Event contracts: each event type is declared once, by the context that publishes it."""

from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

_contracts: dict[tuple[str, int], type["Event"]] = {}


class Event(BaseModel):
    """A fact a context publishes; subclass it in that context's `events.py`, `type` and `version` as class
    attributes and the fields as the payload. Instances are immutable and validated on construction, so an
    invalid payload never reaches the outbox."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: ClassVar[str]
    version: ClassVar[int] = 1

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs):
        super().__pydantic_init_subclass__(**kwargs)
        if "type" not in cls.__dict__:
            return  # an abstract family of events, not a contract
        key = (cls.type, cls.version)
        known = _contracts.get(key)
        # The same class again (its module imported once more) is no second declaration; a class of
        # the same name in another module is (a subscriber's copy of its publisher's contract would
        # silently replace the publisher's).
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"event {cls.type} v{cls.version} is already declared by {known.__module__}")
        _contracts[key] = cls

    @classmethod
    def source(cls) -> str:
        """The publishing context: the app whose `events.py` declares the contract."""
        parts = cls.__module__.split(".")
        return parts[-2] if len(parts) > 1 else parts[0]


class Reader(BaseModel):
    """A subscriber's own view of a payload: just the fields it needs, tolerant of the rest."""

    model_config = ConfigDict(frozen=True, extra="ignore")


_upcasters: dict[tuple[str, int], Callable[[dict], dict]] = {}


def upcaster(event_type: str, *, from_version: int):
    """Register how a payload of `from_version` becomes one of the next version: declared by the publisher beside
    its contracts and applied by dispatch, so a message queued before a contract changed is still read by a
    handler that knows only the new one."""

    def register(function: Callable[[dict], dict]) -> Callable[[dict], dict]:
        _upcasters[(event_type, from_version)] = function
        return function

    return register


def upcast(event_type: str, version: int, payload: dict, *, wanted: frozenset[int]) -> tuple[int, dict]:
    """Apply upcasters until the payload is of a version in `wanted`, or none applies."""
    while version not in wanted and (event_type, version) in _upcasters:
        payload, version = _upcasters[(event_type, version)](payload), version + 1
    return version, payload


def contracts() -> dict[tuple[str, int], type[Event]]:
    """Every declared (type, version) and its contract, for the catalog and the routing table."""
    return dict(sorted(_contracts.items()))
