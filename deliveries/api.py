"""The customer REST API (django-ninja): thin views over services and selectors."""

import hashlib
import json
import logging
from typing import Literal
from uuid import UUID, uuid4

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Header, NinjaAPI, Query, Status
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer

from deliveries import confirmation, rescheduling, selectors, services, timeline_picture
from deliveries.models import Customer, Delivery
from deliveries.openapi import SVG_ANSWER, links_to_the_delivery
from deliveries.rate_limits import CustomerRateThrottle
from deliveries.schemas import (
    ConfirmationIn,
    ConfirmationTokenOut,
    DeliveryAccepted,
    DeliveryOut,
    DeliveryPage,
    DeliveryRequestIn,
    DeliveryRescheduleIn,
    DeliveryStatusOut,
    ErrorOut,
    TimelineEvent,
)
from deliveries.transitions import NotYet, TooLate

logger = logging.getLogger(__name__)


class NotJson(Exception):
    pass


class DuplicateKey(ValueError):
    """A key twice in one JSON object: which one the client meant cannot be known, so neither is taken."""

    def __init__(self, key: str):
        super().__init__(f"the key {key!r} appears twice in one object")
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


class JsonBodyParser(Parser):
    """Accept JSON bodies only, so a form or text body gets a clear 415 instead of a guess; a key
    twice in an object, or nesting deeper than the parser goes, is a clear 400 too."""

    def parse_body(self, request: HttpRequest):
        if request.content_type != "application/json":
            raise NotJson(request.content_type or "none")
        try:
            data = json.loads(request.body, object_pairs_hook=_no_duplicate_keys)
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got a JSON {type(data).__name__}")
        return data


class CustomerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Customer | None:
        return selectors.customer_with_token(token)


api = NinjaAPI(
    title="Drone delivery",
    version="1.0",
    description="Request drone deliveries and follow them. Authenticate with `Authorization: Bearer <token>`.",
    auth=CustomerToken(),
    parser=JsonBodyParser(),
    throttle=[CustomerRateThrottle()],
    urls_namespace="api",
)
ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    415: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
}
RETRY_AFTER_SECONDS = 5


def refused(status: int, error: Exception, field: str, message: str | None = None) -> Status:
    """A view's refusal in the documented error shape: what was wrong, and with which field."""
    return Status(status, {"detail": str(error), "errors": [{"field": field, "message": message or str(error)}]})


def _error(request, status: int, detail: str, errors: list[dict] | None = None) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "errors": errors or []}, status=status)


@api.exception_handler(ValidationError)
def invalid_input(request, exc: ValidationError):
    errors = []
    for error in exc.errors:
        loc = error.get("loc", ())
        path = [str(part) for part in loc if part not in ("body", "payload", "path", "query")]
        if loc[:1] in (("path",), ("query",)):  # a view's own parameter names, in the API's spelling
            path = [_camel(part) for part in path]
        errors.append({"field": ".".join(path) or "body", "message": _plain(error.get("msg", "invalid"))})
    fields = ", ".join(e["field"] for e in errors)
    return _error(request, 422, f"invalid input: {fields}", errors)


def _camel(name: str) -> str:
    """delivery_id -> deliveryId: what every other error and the schema call it."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def _plain(message: str) -> str:
    """pydantic's message without its "Value error, " prefix (a validator's own words follow it)."""
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    cause = exc.__cause__
    if isinstance(cause, NotJson):
        return _error(
            request,
            415,
            f"the body must be application/json, not {cause}",
            [{"field": "Content-Type", "message": "expected application/json"}],
        )
    if isinstance(cause, DuplicateKey):
        return _error(request, 400, str(cause), [{"field": cause.key, "message": "appears twice in one object"}])
    if isinstance(cause, ValueError):
        return _error(request, 400, "the body is not a JSON object", [{"field": "body", "message": str(cause)}])
    return _error(request, exc.status_code, str(exc), getattr(exc, "errors", None))


@api.exception_handler(Throttled)
def throttled(request, exc: Throttled):
    """ninja adds the Retry-After header (seconds until the window ends) to this answer."""
    return _error(
        request,
        429,
        f"more than {settings.API_RATE_LIMIT} requests; retry after the Retry-After header's seconds",
        [{"field": "Authorization", "message": "rate limit per customer exceeded"}],
    )


@api.exception_handler(AuthenticationError)
def unauthenticated(request, exc):
    response = _error(
        request,
        401,
        "a valid bearer token is required",
        [{"field": "Authorization", "message": "missing, unknown, revoked or expired bearer token"}],
    )
    response["WWW-Authenticate"] = 'Bearer realm="api"'  # RFC 6750: say which scheme to use
    return response


@api.exception_handler(RequestDataTooBig)
def too_big(request, exc):
    return _error(request, 413, "the body is larger than 64 KiB", [{"field": "body", "message": "too large"}])


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def database_unavailable(request, exc):
    """The database restarts, or every pooled connection stayed busy. A write is one transaction,
    so it either committed whole or not at all; resending with the same Idempotency-Key is safe."""
    response = _error(
        request,
        503,
        "the database is unavailable; retry later with the same Idempotency-Key",
        [{"field": "database", "message": "unreachable or busy"}],
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def unknown_path(request, *args, **kwargs) -> JsonResponse:
    """Any other path under /api/: the API's JSON error, not Django's HTML page."""
    return JsonResponse(
        {"detail": f"no such path: {request.path}", "errors": [{"field": "path", "message": "not found"}]},
        status=404,
    )


def _own(request, delivery_id: UUID) -> Delivery:
    delivery = selectors.delivery_of(request.auth, delivery_id)
    if delivery is None:
        missing = HttpError(404, f"no delivery {delivery_id}")
        missing.errors = [{"field": "deliveryId", "message": "no such delivery of yours"}]
        raise missing
    return delivery


def _location(value: dict | None) -> dict | None:
    return None if value is None else {k: value.get(k) for k in ("latitude", "longitude", "altitude")}


def _accepted(delivery: Delivery) -> dict:
    return {
        "delivery_id": delivery.id,
        "status": Delivery.Status.REQUESTED,
        "pickup_location": _location(delivery.pickup_location),
        "drop_off_location": _location(delivery.dropoff_location),
        "pickup_time": delivery.pickup_time,
        "deadline": delivery.deadline,
        "expedited": delivery.expedited,
        "confirmation_required": delivery.confirmation_required,
        "package_info": {
            "package_id": delivery.package_id,
            "size": delivery.package_size,
            "weight": delivery.package_weight_kg,
            "tag": delivery.package_tag or None,
        },
    }


def _delivery(delivery: Delivery) -> dict:
    return {
        **_accepted(delivery),
        "status": delivery.status,
        "status_reason": delivery.status_reason or None,
        "drone_id": delivery.drone_id,
        "last_known_location": _location(delivery.last_known_location),
        "pickup_eta": delivery.pickup_eta,
        "waiting_since": delivery.waiting_since,
        "drone_scheduled_at": delivery.drone_scheduled_at,
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
    }


def _status(delivery: Delivery) -> dict:
    return {
        "status": delivery.status,
        "status_reason": delivery.status_reason or None,
        "last_known_location": _location(delivery.last_known_location),
        "pickup_eta": delivery.pickup_eta,
        "delivery_eta": delivery.eta,
    }


@api.post(
    "/deliveryrequests",
    response={202: DeliveryAccepted, **ERRORS},
    by_alias=True,
    summary="Request a delivery",
    openapi_extra=links_to_the_delivery(),
)
def request_delivery(
    request,
    response: HttpResponse,
    payload: DeliveryRequestIn,
    idempotency_key: str | None = Header(
        None, alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x20-\x7e]+$"
    ),
):
    package = payload.package_info
    try:
        delivery, created = _request_delivery(request, payload, package, idempotency_key)
    except services.IdempotencyKeyReused as error:
        return refused(422, error, "Idempotency-Key")
    except services.IdempotencyKeyInFlight as error:
        return refused(409, error, "Idempotency-Key")
    except services.PackageAlreadyTravelling as error:
        return refused(409, error, "packageInfo.packageId")
    response["Location"] = f"/api/deliveries/{delivery.id}"
    # The web's line of the delivery's story: `grep <delivery id>` finds it beside the workers' lines.
    if created:
        logger.info("delivery %s accepted", delivery.id, extra={"correlation_id": str(delivery.id)})
    else:  # nothing new happened: the same request resent with its Idempotency-Key
        logger.info(
            "delivery %s: Idempotency-Key repeated, its first answer sent again",
            delivery.id,
            extra={"correlation_id": str(delivery.id)},
        )
    return Status(202, delivery.first_answer)


def _request_delivery(request, payload, package, idempotency_key):
    return services.request_delivery(
        customer=request.auth,
        idempotency_key=idempotency_key,
        fingerprint=_fingerprint(request.body),
        request=services.DeliveryRequest(
            pickup=payload.pickup_location.model_dump(),
            dropoff=payload.drop_off_location.model_dump(),
            pickup_time=payload.pickup_time,
            deadline=payload.deadline,
            expedited=payload.expedited,
            confirmation_required=payload.confirmation_required,
            package_id=package.package_id or uuid4(),
            package_size=package.size,
            package_weight_kg=package.weight,
            package_tag=package.tag or "",
        ),
        answer=lambda d: DeliveryAccepted.model_validate(_accepted(d)).model_dump(mode="json", by_alias=True),
    )


def _fingerprint(body: bytes) -> str:
    """The request as its JSON says it, whatever the order of its keys and its white space."""
    canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


PAGE_SIZE = 20
MAX_PAGE = 100_000  # 2,000,000 deliveries; a larger page would overflow the database's OFFSET


@api.get(
    "/deliveries",
    response={200: DeliveryPage, **ERRORS},
    by_alias=True,
    summary="My deliveries, newest first, 20 a page",
)
def list_deliveries(request, page: int = Query(1, ge=1, le=MAX_PAGE)):
    deliveries = selectors.deliveries_of(request.auth)
    start = (page - 1) * PAGE_SIZE
    items = [_delivery(d) for d in deliveries[start : start + PAGE_SIZE]]
    return Status(200, {"items": items, "count": deliveries.count()})


@api.get("/deliveries/{delivery_id}", response={200: DeliveryOut, **ERRORS}, by_alias=True)
def get_delivery(request, delivery_id: UUID):
    return Status(200, _delivery(_own(request, delivery_id)))


@api.get("/deliveries/{delivery_id}/status", response={200: DeliveryStatusOut, **ERRORS}, by_alias=True)
def get_status(request, delivery_id: UUID):
    return Status(200, _status(_own(request, delivery_id)))


@api.get(
    "/deliveries/{delivery_id}/timeline",
    response={200: list[TimelineEvent], **ERRORS},
    by_alias=True,
    summary="Every event of the delivery in causal order, with who processed it",
    description="JSON by default; the same as a sequence diagram with `?format=svg` or `Accept: image/svg+xml`.",
    openapi_extra=SVG_ANSWER,
)
def get_timeline(request, delivery_id: UUID, format: Literal["json", "svg"] | None = None):
    delivery = _own(request, delivery_id)
    if timeline_picture.wants_svg(request, format):
        return HttpResponse(timeline_picture.timeline_svg(delivery), content_type=timeline_picture.SVG)
    return Status(200, selectors.timeline(delivery))


@api.patch(
    "/deliveryrequests/{delivery_id}",
    response={202: DeliveryOut, **ERRORS},
    by_alias=True,
    summary="Reschedule a delivery before dispatch (times or places)",
)
def reschedule_delivery(request, delivery_id: UUID, payload: DeliveryRescheduleIn):
    _own(request, delivery_id)
    try:
        delivery = rescheduling.reschedule_delivery(
            delivery_id=delivery_id,
            customer=request.auth,
            pickup_time=payload.pickup_time,
            deadline=payload.deadline,
            pickup=payload.pickup_location.model_dump() if payload.pickup_location else None,
            dropoff=payload.drop_off_location.model_dump() if payload.drop_off_location else None,
        )
    except TooLate as error:
        return refused(409, error, "status", error.reason)
    except rescheduling.InvalidReschedule as error:
        return refused(422, error, error.field)
    return Status(202, _delivery(delivery))


@api.delete(
    "/deliveryrequests/{delivery_id}",
    response={202: DeliveryStatusOut, **ERRORS},
    by_alias=True,
    summary="Cancel a delivery before dispatch",
)
def cancel_delivery(request, delivery_id: UUID):
    _own(request, delivery_id)
    try:
        delivery = services.cancel_delivery(delivery_id=delivery_id, customer=request.auth)
    except TooLate as error:
        return refused(409, error, "status", error.reason)
    return Status(202, _status(delivery))


@api.post(
    "/deliveries/{delivery_id}/confirmation-token",
    response={201: ConfirmationTokenOut, **ERRORS},
    by_alias=True,
    summary="Get the task token for a delivery awaiting confirmation (shown once; asking again replaces it)",
)
def issue_confirmation_token(request, delivery_id: UUID):
    _own(request, delivery_id)
    try:
        token = confirmation.issue_confirmation_token(delivery_id=delivery_id, customer=request.auth)
    except (TooLate, NotYet) as error:
        return refused(409, error, "status", error.reason)
    return Status(201, {"confirmation_token": token})


@api.post(
    "/deliveries/{delivery_id}/confirmations",
    response={200: DeliveryOut, **ERRORS},
    by_alias=True,
    summary="Confirm a delivery awaiting confirmation with its task token (proof of delivery)",
)
def confirm_delivery(request, delivery_id: UUID, payload: ConfirmationIn):
    _own(request, delivery_id)
    proof = confirmation.Confirmation(
        token=payload.token,
        confirmation_type=payload.confirmation_type,
        date_time=payload.date_time,
        geo_coordinates=payload.geo_coordinates.model_dump() if payload.geo_coordinates else None,
        confirmation_blob=payload.confirmation_blob,
    )
    try:
        delivery = confirmation.confirm_delivery(delivery_id=delivery_id, customer=request.auth, confirmation=proof)
    except TooLate as error:
        return refused(409, error, "status", error.reason)
    except confirmation.WrongToken as error:
        return refused(403, error, "token")
    except confirmation.WrongConfirmationType as error:
        return refused(422, error, "confirmationType")
    return Status(200, _delivery(delivery))
