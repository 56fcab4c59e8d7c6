"""The site's REST API (django-ninja): the `NinjaAPI`, how a request is read and who makes it, and
how every failure is answered, in the one error shape that names the field at fault. Each context
mounts a router of its own; a refusal of a context's service is answered here, by its kind."""

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer

from deliveries import confirmation, rescheduling, selectors, services
from deliveries.api import router as deliveries
from deliveries.models import Customer
from deliveries.rate_limits import CustomerRateThrottle
from deliveries.transitions import NotYet, TooLate
from delivery_project.field_errors import field_error_message
from notifications.api import notify_me_router
from notifications.services import NothingLeftToTell, TooManyRequests
from outbox.ops import acting_as
from webhooks.api import router as webhooks
from webhooks.services import RefusedUrl, UnknownEventType

RETRY_AFTER_SECONDS = 5


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
        with acting_as("deliveries"):  # the customers are the deliveries context's, whoever's the path is
            return selectors.customer_with_token(token)


class CustomerRate(CustomerRateThrottle):
    def allow_request(self, request) -> bool:
        with acting_as("deliveries"):  # its counters are the deliveries context's, whoever's the path is
            return super().allow_request(request)


api = NinjaAPI(
    title="Drone delivery",
    version="1.0",
    description="Request drone deliveries and follow them. Authenticate with `Authorization: Bearer <token>`.",
    auth=CustomerToken(),
    parser=JsonBodyParser(),
    throttle=[CustomerRate()],
    urls_namespace="api",
)
api.add_router("/", deliveries)


def _delivery_state(customer: Customer, delivery_id) -> tuple[str, bool] | None:
    """A delivery of the customer's status and whether it has ended, for the notifications' router."""
    delivery = selectors.delivery_of(customer, delivery_id)
    return None if delivery is None else (delivery.status, delivery.is_terminal)


api.add_router("/", notify_me_router(delivery_state=_delivery_state))
api.add_router("/", webhooks)

# A context's refusal, as the API answers it: its status, and the field of the request it names
# (one the refusal names itself, `field`, wins); its message is the refusal's `reason`, if it has one.
REFUSALS: dict[type[Exception], tuple[int, str]] = {
    services.IdempotencyKeyReused: (422, "Idempotency-Key"),
    services.IdempotencyKeyInFlight: (409, "Idempotency-Key"),
    services.PackageAlreadyTravelling: (409, "packageInfo.packageId"),
    TooLate: (409, "status"),
    NotYet: (409, "status"),
    rescheduling.InvalidReschedule: (422, "body"),
    confirmation.WrongToken: (403, "token"),
    confirmation.WrongConfirmationType: (422, "confirmationType"),
    TooManyRequests: (409, "delivery"),
    NothingLeftToTell: (409, "status"),
    RefusedUrl: (422, "url"),
    UnknownEventType: (422, "eventTypes"),
}


def _error(request, status: int, detail: str, errors: list[dict] | None = None) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "errors": errors or []}, status=status)


def refused(request, exc: Exception) -> HttpResponse:
    status, field = REFUSALS[type(exc)]
    field = getattr(exc, "field", None) or field
    return _error(request, status, str(exc), [{"field": field, "message": getattr(exc, "reason", None) or str(exc)}])


for refusal in REFUSALS:
    api.add_exception_handler(refusal, refused)


@api.exception_handler(ValidationError)
def invalid_input(request, exc: ValidationError):
    errors = []
    for error in exc.errors:
        loc = error.get("loc", ())
        path = [str(part) for part in loc if part not in ("body", "payload", "path", "query")]
        if loc[:1] in (("path",), ("query",)):  # a view's own parameter names, in the API's spelling
            path = [_camel(part) for part in path]
        errors.append({"field": ".".join(path) or "body", "message": field_error_message(error)})
    fields = ", ".join(e["field"] for e in errors)
    return _error(request, 422, f"invalid input: {fields}", errors)


def _camel(name: str) -> str:
    """delivery_id -> deliveryId: what every other error and the schema call it."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


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
