"""The envelope every message travels in (the guide's Concepts, "The envelope")."""

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class Envelope(BaseModel):
    """What every message carries around its payload: who and what it is, its place in its stream
    and its story. Read-only, and tolerant: a field it does not know is ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message_id: UUID
    type: str = Field(min_length=1)
    version: int = Field(ge=1)
    occurred_at: datetime
    correlation_id: UUID
    causation_id: UUID | None = None
    stream: str
    sequence: int = Field(ge=1)
    hops: int = Field(ge=0)
    payload: dict[str, Any]
    # W3C trace context of the span that published it (outbox.observability.tracing), when tracing is on. A value
    # that does not fit is dropped, never a reason to refuse the message: it is only for tracing.
    traceparent: str | None = None
    tracestate: str | None = None

    @field_validator("traceparent", "tracestate", mode="before")
    @classmethod
    def _dropped_unless_it_fits(cls, value: object, info: ValidationInfo) -> str | None:
        limit = {"traceparent": 55, "tracestate": 512}[str(info.field_name)]
        return value if isinstance(value, str) and len(value) <= limit else None

    def trace_context(self) -> dict[str, str]:
        return {key: value for key in ("traceparent", "tracestate") if (value := getattr(self, key))}
