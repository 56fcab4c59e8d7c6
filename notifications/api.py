"""The notifications' part of the REST API: a customer asks to be told of each status change of a
delivery of theirs. The address is the notifications context's to keep (its own table, never an
event); whose delivery it is and where it stands, the deployable says when it mounts the router (`delivery_state`)."""

import re
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from ninja import Router, Status
from ninja.errors import HttpError
from pydantic import Field, field_validator, model_validator

from common.schemas import ERRORS, CamelSchema, RequestSchema
from notifications import services
from outbox.ops import acting_as

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


def notify_me_router(*, delivery_state: Callable[[object, UUID], tuple[str, bool] | None]) -> Router:
    """The router, told by `delivery_state(customer, delivery_id)` a delivery of the caller's status
    and whether it has ended (None: no delivery of theirs)."""
    router = Router(tags=["notifications"])

    @router.post(
        "/deliveries/{delivery_id}/notifymerequests",
        response={201: NotifyMeRequestOut, **ERRORS},
        by_alias=True,
        summary="Be told of each status change of a delivery, by e-mail, SMS or both",
    )
    def request_notifications(request, delivery_id: UUID, payload: NotifyMeRequestIn):
        state = delivery_state(request.auth, delivery_id)
        if state is None:
            raise HttpError(404, f"no delivery {delivery_id}")
        status, ended = state
        if ended:
            raise services.NothingLeftToTell(status)
        with acting_as("notifications"):  # under the notifications' role, in a request of the deliveries'
            created = services.request_notifications(
                delivery_id=delivery_id, email_address=payload.email_address or "", sms=payload.sms or ""
            )
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

    return router
