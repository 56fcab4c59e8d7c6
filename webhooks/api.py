"""The webhooks' part of the REST API: a customer's endpoints, their secrets, and every attempt to
send to them. The customer is the one the deployable's bearer auth found (`request.auth`), by id only."""

from datetime import datetime
from typing import Annotated
from uuid import UUID

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from ninja import Query, Router, Status
from ninja.errors import HttpError
from pydantic import AfterValidator, Field

from common.schemas import ERRORS, CamelSchema, RequestSchema
from webhooks import selectors, services
from webhooks.models import Endpoint

PAGE_SIZE = 20
MAX_PAGE = 100_000

router = Router(tags=["webhooks"])


def _email_address(value: str) -> str:
    try:
        value and validate_email(value)
    except DjangoValidationError as error:
        raise ValueError("not a valid e-mail address") from error
    return value


AlertEmail = Annotated[str, AfterValidator(_email_address)]  # "" for none


class EndpointIn(RequestSchema):
    url: str = Field(min_length=1, max_length=2000, description="https:// (http:// only where the deployment allows)")
    description: str = Field("", max_length=200)
    event_types: list[str] = Field(
        default_factory=list,
        max_length=len(services.EVENT_TYPES),
        description=f"Any of {', '.join(services.EVENT_TYPES)}; none: every type.",
    )
    alert_email: AlertEmail = Field(
        "",
        max_length=254,
        description="Whom to e-mail if the endpoint is disabled (no success for days).",
        json_schema_extra={"format": "email"},
    )


class EndpointChange(RequestSchema):
    """What to change of an endpoint: a field left out stays as it is."""

    url: str = Field(None, min_length=1, max_length=2000, description="Checked as at registration")
    description: str = Field(None, max_length=200)
    event_types: list[str] = Field(None, max_length=len(services.EVENT_TYPES), description="[]: every type.")
    alert_email: AlertEmail = Field(
        None, max_length=254, description='"": no e-mail.', json_schema_extra={"format": "email"}
    )


class EndpointOut(CamelSchema):
    id: UUID
    url: str
    description: str
    event_types: list[str]
    alert_email: str | None
    created_at: datetime
    enabled: bool
    disabled_at: datetime | None
    disabled_reason: str | None
    failing_since: datetime | None


class EndpointCreated(EndpointOut):
    secret: str = Field(description="Signs every message (Standard Webhooks); shown in this answer only.")


class EndpointPage(CamelSchema):
    items: list[EndpointOut]
    count: int


class SecretOut(CamelSchema):
    secret: str
    previous_secret_expires_at: datetime


class PingQueued(CamelSchema):
    webhook_id: str


class AttemptOut(CamelSchema):
    webhook_id: str
    event_type: str
    delivery_id: UUID | None
    status_code: int | None
    error: str | None
    duration_ms: int
    attempted_at: datetime


class AttemptPage(CamelSchema):
    items: list[AttemptOut]
    count: int


def _endpoint(endpoint: Endpoint) -> dict:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": endpoint.event_types,
        "alert_email": endpoint.alert_email or None,
        "created_at": endpoint.created_at,
        "enabled": endpoint.enabled,
        "disabled_at": endpoint.disabled_at,
        "disabled_reason": endpoint.disabled_reason or None,
        "failing_since": endpoint.failing_since,
    }


def _own(request, endpoint_id: UUID) -> Endpoint:
    endpoint = selectors.endpoint_of(request.auth.pk, endpoint_id)
    if endpoint is None:
        raise HttpError(404, f"no webhook endpoint {endpoint_id}")
    return endpoint


@router.post(
    "/webhookendpoints",
    response={201: EndpointCreated, **ERRORS},
    by_alias=True,
    summary="Register an endpoint to be POSTed each status change of my deliveries",
)
def create_endpoint(request, payload: EndpointIn):
    endpoint = services.create_endpoint(
        customer_id=request.auth.pk,
        url=payload.url,
        description=payload.description,
        event_types=payload.event_types,
        alert_email=payload.alert_email,
    )
    return Status(201, {**_endpoint(endpoint), "secret": endpoint.secret})


@router.get(
    "/webhookendpoints", response={200: EndpointPage, **ERRORS}, by_alias=True, summary="My endpoints, 20 a page"
)
def list_endpoints(request, page: int = Query(1, ge=1, le=MAX_PAGE)):
    endpoints = selectors.endpoints_of(request.auth.pk)
    start = (page - 1) * PAGE_SIZE
    return Status(
        200, {"items": [_endpoint(e) for e in endpoints[start : start + PAGE_SIZE]], "count": endpoints.count()}
    )


@router.get("/webhookendpoints/{endpoint_id}", response={200: EndpointOut, **ERRORS}, by_alias=True)
def get_endpoint(request, endpoint_id: UUID):
    return Status(200, _endpoint(_own(request, endpoint_id)))


@router.patch(
    "/webhookendpoints/{endpoint_id}",
    response={200: EndpointOut, **ERRORS},
    by_alias=True,
    summary="Change an endpoint's URL, description, event types or alert address",
)
def update_endpoint(request, endpoint_id: UUID, payload: EndpointChange):
    endpoint = services.update_endpoint(endpoint=_own(request, endpoint_id), **payload.model_dump(exclude_unset=True))
    return Status(200, _endpoint(endpoint))


@router.delete("/webhookendpoints/{endpoint_id}", response={204: None, **ERRORS}, summary="Send nothing more to it")
def delete_endpoint(request, endpoint_id: UUID):
    services.delete_endpoint(endpoint=_own(request, endpoint_id))
    return Status(204, None)


@router.post(
    "/webhookendpoints/{endpoint_id}/rotate-secret",
    response={200: SecretOut, **ERRORS},
    by_alias=True,
    summary="A new secret; the old one signs too until previousSecretExpiresAt",
)
def rotate_secret(request, endpoint_id: UUID):
    endpoint = services.rotate_secret(endpoint=_own(request, endpoint_id))
    return Status(200, {"secret": endpoint.secret, "previous_secret_expires_at": endpoint.previous_secret_expires_at})


@router.post(
    "/webhookendpoints/{endpoint_id}/ping",
    response={202: PingQueued, **ERRORS},
    by_alias=True,
    summary="Send a webhook.ping message to the endpoint",
)
def ping(request, endpoint_id: UUID):
    message = services.ping(endpoint=_own(request, endpoint_id))
    return Status(202, {"webhook_id": message.pk})


@router.post(
    "/webhookendpoints/{endpoint_id}/enable",
    response={200: EndpointOut, **ERRORS},
    by_alias=True,
    summary="Send to a disabled endpoint again: what it is owed first, oldest first",
)
def enable(request, endpoint_id: UUID):
    return Status(200, _endpoint(services.enable(endpoint=_own(request, endpoint_id))))


@router.get(
    "/webhookendpoints/{endpoint_id}/attempts",
    response={200: AttemptPage, **ERRORS},
    by_alias=True,
    summary="Every attempt to send to the endpoint, newest first, 20 a page",
)
def attempts(request, endpoint_id: UUID, page: int = Query(1, ge=1, le=MAX_PAGE)):
    made = selectors.attempts_at(_own(request, endpoint_id))
    start = (page - 1) * PAGE_SIZE
    items = [
        {
            "webhook_id": attempt.message_id,
            "event_type": attempt.message.event_type,
            "delivery_id": attempt.message.delivery_id,
            "status_code": attempt.status_code,
            "error": attempt.error or None,
            "duration_ms": attempt.duration_ms,
            "attempted_at": attempt.attempted_at,
        }
        for attempt in made[start : start + PAGE_SIZE]
    ]
    return Status(200, {"items": items, "count": made.count()})
