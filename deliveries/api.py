"""The deliveries' part of the REST API (a django-ninja router the site's API mounts): thin views
over services and selectors. A service's refusal is answered by the site's API, by its kind."""

import hashlib
import json
import logging
from typing import Literal
from uuid import UUID, uuid4

from django.http import HttpResponse
from ninja import Header, Query, Router, Status
from ninja.errors import HttpError

from common.schemas import ERRORS
from deliveries import confirmation, rescheduling, selectors, services, timeline_picture
from deliveries.models import Delivery
from deliveries.openapi import SVG_ANSWER, links_to_the_delivery
from deliveries.schemas import (
    ConfirmationIn,
    ConfirmationTokenOut,
    DeliveryAccepted,
    DeliveryOut,
    DeliveryPage,
    DeliveryRequestIn,
    DeliveryRescheduleIn,
    DeliveryStatusOut,
    TimelineEvent,
)

logger = logging.getLogger(__name__)
router = Router()


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


@router.post(
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
    delivery, created = _request_delivery(request, payload, package, idempotency_key)
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
    return Status(202, _accepted(delivery))


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
    )


def _fingerprint(body: bytes) -> str:
    """The request as its JSON says it, whatever the order of its keys and its white space."""
    canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


PAGE_SIZE = 20
MAX_PAGE = 100_000  # 2,000,000 deliveries; a larger page would overflow the database's OFFSET


@router.get(
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


@router.get("/deliveries/{delivery_id}", response={200: DeliveryOut, **ERRORS}, by_alias=True)
def get_delivery(request, delivery_id: UUID):
    return Status(200, _delivery(_own(request, delivery_id)))


@router.get("/deliveries/{delivery_id}/status", response={200: DeliveryStatusOut, **ERRORS}, by_alias=True)
def get_status(request, delivery_id: UUID):
    return Status(200, _status(_own(request, delivery_id)))


@router.get(
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


@router.patch(
    "/deliveryrequests/{delivery_id}",
    response={202: DeliveryOut, **ERRORS},
    by_alias=True,
    summary="Reschedule a delivery before dispatch (times or places)",
)
def reschedule_delivery(request, delivery_id: UUID, payload: DeliveryRescheduleIn):
    _own(request, delivery_id)
    delivery = rescheduling.reschedule_delivery(
        delivery_id=delivery_id,
        customer=request.auth,
        pickup_time=payload.pickup_time,
        deadline=payload.deadline,
        pickup=payload.pickup_location.model_dump() if payload.pickup_location else None,
        dropoff=payload.drop_off_location.model_dump() if payload.drop_off_location else None,
    )
    return Status(202, _delivery(delivery))


@router.delete(
    "/deliveryrequests/{delivery_id}",
    response={202: DeliveryStatusOut, **ERRORS},
    by_alias=True,
    summary="Cancel a delivery before dispatch",
)
def cancel_delivery(request, delivery_id: UUID):
    _own(request, delivery_id)
    delivery = services.cancel_delivery(delivery_id=delivery_id, customer=request.auth)
    return Status(202, _status(delivery))


@router.post(
    "/deliveries/{delivery_id}/confirmation-token",
    response={201: ConfirmationTokenOut, **ERRORS},
    by_alias=True,
    summary="Get the task token for a delivery awaiting confirmation (shown once; asking again replaces it)",
)
def issue_confirmation_token(request, delivery_id: UUID):
    _own(request, delivery_id)
    token = confirmation.issue_confirmation_token(delivery_id=delivery_id, customer=request.auth)
    return Status(201, {"confirmation_token": token})


@router.post(
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
    delivery = confirmation.confirm_delivery(delivery_id=delivery_id, customer=request.auth, confirmation=proof)
    return Status(200, _delivery(delivery))
