"""`POST /api/deliveries/{id}/notifymerequests`: wiring between two contexts, so it lives here.

The deliveries context knows whose delivery it is; the notifications context keeps the address
(personal data) in its own table and never puts it in an event. Neither imports the other.
"""

import re
from datetime import datetime
from uuid import UUID

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from ninja import Router, Status
from ninja.errors import HttpError
from pydantic import Field, field_validator, model_validator

from deliveries import selectors
from deliveries.api import ERRORS, refused
from deliveries.schemas import CamelSchema, RequestSchema
from notifications import services as notifications
from outbox.ops import acting_as

router = Router(tags=["notifications"])
E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


class NotifyMeRequestIn(RequestSchema):
    email_address: str = Field(
        None, max_length=254, description="Where to e-mail each status change.", json_schema_extra={"format": "email"}
    )
    sms: str = Field(None, max_length=16, pattern=E164.pattern, description="E.164 number, e.g. +14255550123.")

    @field_validator("email_address")
    @classmethod
    def _an_email_address(cls, value: str) -> str:
        try:
            validate_email(value)
        except DjangoValidationError as error:
            raise ValueError("not a valid e-mail address") from error
        return value

    @model_validator(mode="after")
    def _at_least_one(self) -> "NotifyMeRequestIn":
        if not self.email_address and not self.sms:
            raise ValueError("give emailAddress, sms, or both")
        return self


class NotifyMeRequestOut(CamelSchema):
    id: int
    delivery_id: UUID
    email_address: str | None
    sms: str | None
    created_at: datetime


@router.post(
    "/deliveries/{delivery_id}/notifymerequests",
    response={201: NotifyMeRequestOut, **ERRORS},
    by_alias=True,
    summary="Be told of each status change of a delivery, by e-mail, SMS or both",
)
def request_notifications(request, delivery_id: UUID, payload: NotifyMeRequestIn):
    if selectors.delivery_of(request.auth, delivery_id) is None:
        raise HttpError(404, f"no delivery {delivery_id}")
    try:
        with acting_as("notifications"):  # the address is the notifications context's to keep
            created = notifications.request_notifications(
                delivery_id=delivery_id, email_address=payload.email_address or "", sms=payload.sms or ""
            )
    except notifications.TooManyRequests as error:
        return refused(409, error, "delivery")
    return Status(
        201,
        {
            "id": created.pk,
            "delivery_id": delivery_id,
            "email_address": created.email_address or None,
            "sms": created.sms or None,
            "created_at": created.created_at,
        },
    )
