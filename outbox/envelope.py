"""The envelope every message travels in (docs/architecture.md, "The envelope")."""

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field


class Envelope(BaseModel):
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
