"""The deliveries' JSON shapes: the Fabrikam ingestion contract, camelCase on the wire."""

import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from uuid import UUID

from django.conf import settings
from django.utils import timezone
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from common.schemas import CamelSchema, RequestSchema
from deliveries.deadlines import unmeetable


def _text(value: object) -> object:
    """A JSON number is no timestamp: `"pickupTime": 0` would otherwise quietly mean 1970."""
    if not isinstance(value, str | datetime):
        raise ValueError("must be an ISO 8601 date-time string, like 2026-12-07T10:00:00Z")
    return value


Timestamp = Annotated[datetime, BeforeValidator(_text)]
# JSON Schema cannot bound a date-time by "now", so the rules are stated in words.
PICKUP_TIME_RULE = (
    "When the parcel is ready (ISO 8601; UTC when no zone is given): at most "
    "DELIVERY_PICKUP_TIME_TOLERANCE_SECONDS (300 s) in the past, which means now, and at most "
    "DELIVERY_BOOKING_HORIZON_DAYS (90 days) ahead."
)
DEADLINE_RULE = (
    "Not before pickupTime plus the fastest flight from pickup to drop-off (at DELIVERY_FASTEST_DRONE_KMH), "
    "and at most DELIVERY_BOOKING_HORIZON_DAYS (90 days) ahead."
)
# `false` or `"1.5"` is no coordinate: refuse it rather than store 0.0 or guess (integers are numbers).
Number = Annotated[float, Strict()]


def _printable(value: str | None) -> str | None:
    """Control characters (NUL above all, which PostgreSQL refuses in text) and invisible format
    characters (a right-to-left override that makes a label read backwards in the console, zero-width
    spaces) are no part of a label."""
    if value is not None and any(unicodedata.category(c) in ("Cc", "Cf") for c in value):
        raise ValueError("must not contain control or invisible format characters")
    return value


# The same, for the OpenAPI schema: controls, and the common format characters (bidi overrides and
# isolates, zero-width characters, the byte order mark).
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]*$"


class Location(CamelSchema):
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)
    altitude: float | None = None


class LocationIn(RequestSchema):
    latitude: Number = Field(ge=-90, le=90)
    longitude: Number = Field(ge=-180, le=180)
    altitude: Number | None = Field(None, ge=-500, le=10_000, description="metres")


class PackageInfo(CamelSchema):
    package_id: UUID | None = None
    size: Literal["Small", "Medium", "Large"]
    weight: float = Field(gt=0, le=1000, description="kg")
    tag: str | None = Field(None, max_length=100, description="A label for the package; not for personal data.")


# The request takes any weight up to a tonne; what a drone can carry is the packages context's to
# decide, after the 202 (the choreography: a package too heavy for its size fails the delivery).
WEIGHT_LIMITS = (
    "kg, at least a gram. A drone carries at most "
    + ", ".join(f"{size} {limit:g} kg" for size, limit in settings.PACKAGE_MAX_WEIGHT_KG.items())
    + ": a heavier package is accepted (202), and its delivery then fails with statusReason too_heavy"
)


class PackageInfoIn(RequestSchema):
    package_id: UUID | None = None
    size: Literal["Small", "Medium", "Large"]
    weight: Number = Field(ge=0.001, le=1000, description=WEIGHT_LIMITS)
    tag: str | None = Field(
        None,
        max_length=100,
        description="A label for the package, without control or invisible format characters; not for personal data.",
        json_schema_extra={"pattern": PRINTABLE},
    )

    @field_validator("tag")
    @classmethod
    def _tag_printable(cls, tag: str | None) -> str | None:
        return _printable(tag)


def _aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _within_horizon(value: datetime | None, name: str) -> datetime | None:
    """Not further ahead than DELIVERY_BOOKING_HORIZON_DAYS: year 9999 overflows in UTC, and a
    date that cannot be stored or read back would wedge the delivery and its drone."""
    value = _aware(value)
    horizon = settings.DELIVERY_BOOKING_HORIZON_DAYS
    if value is not None and value > timezone.now() + timedelta(days=horizon):
        raise ValueError(f"{name} must not be more than {horizon:g} days ahead")
    return value


def _not_past(pickup: datetime | None) -> datetime | None:
    """A pickup time a little in the past means "now"; one further back is a mistake, refused."""
    pickup = _within_horizon(pickup, "pickupTime")
    tolerance = settings.DELIVERY_PICKUP_TIME_TOLERANCE_SECONDS
    if pickup is not None and pickup < timezone.now() - timedelta(seconds=tolerance):
        raise ValueError(f"pickupTime must not be more than {tolerance:.0f} s in the past")
    return pickup


class DeliveryRequestIn(RequestSchema):
    pickup_location: LocationIn
    drop_off_location: LocationIn
    pickup_time: Timestamp = Field(description=PICKUP_TIME_RULE)
    deadline: Timestamp | None = Field(None, description=DEADLINE_RULE)
    expedited: StrictBool = False
    confirmation_required: Literal["None", "FingerPrint", "Picture", "Voice"] = "None"
    package_info: PackageInfoIn

    @field_validator("pickup_time")
    @classmethod
    def _pickup_in_utc_when_naive_and_not_past(cls, pickup: datetime) -> datetime:
        return _not_past(pickup)

    @field_validator("deadline")
    @classmethod
    def _deadline_a_drone_can_meet(cls, deadline: datetime | None, info: ValidationInfo) -> datetime | None:
        deadline, pickup = _within_horizon(deadline, "deadline"), info.data.get("pickup_time")
        if deadline is not None and pickup is not None and deadline < pickup:
            raise ValueError("deadline must not be before pickupTime")
        places = info.data.get("pickup_location"), info.data.get("drop_off_location")
        if deadline is not None and pickup is not None and None not in places:
            pickup_location, drop_off_location = (place.model_dump() for place in places)
            refusal = unmeetable(
                deadline=deadline,
                pickup_time=max(pickup, timezone.now()),
                pickup=pickup_location,
                dropoff=drop_off_location,
            )
            if refusal:
                raise ValueError(refusal)
        return deadline


class DeliveryRescheduleIn(RequestSchema):
    """Any of these, before dispatch; new places re-run drone scheduling."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    # Each may be left out, none may be null: null would read as "remove", which no field allows.
    pickup_time: Timestamp = Field(None, description=PICKUP_TIME_RULE)
    deadline: Timestamp = Field(None, description=DEADLINE_RULE)
    pickup_location: LocationIn = None
    drop_off_location: LocationIn = None

    @field_validator("pickup_time")
    @classmethod
    def _pickup_in_utc_when_naive_and_not_past(cls, pickup: datetime | None) -> datetime | None:
        return _not_past(pickup)

    @field_validator("deadline")
    @classmethod
    def _utc_when_naive(cls, value: datetime | None) -> datetime | None:
        return _within_horizon(value, "deadline")

    @model_validator(mode="after")
    def _something_to_change(self) -> "DeliveryRescheduleIn":
        if not self.model_fields_set:
            raise ValueError("give at least one of pickupTime, deadline, pickupLocation, dropOffLocation")
        return self


class ConfirmationIn(RequestSchema):
    """Proof of delivery: the Fabrikam confirmation, plus the task token the delivery was given."""

    token: str = Field(min_length=1, max_length=64, description="The confirmationToken of the delivery.")
    confirmation_type: Literal["FingerPrint", "Picture", "Voice"]
    date_time: Timestamp = Field(description="When it was confirmed (ISO 8601).")
    geo_coordinates: LocationIn = None
    confirmation_blob: str = Field(None, max_length=48_000, description="The fingerprint, picture or voice, encoded.")


class DeliveryAccepted(CamelSchema):
    delivery_id: UUID
    status: str
    pickup_location: Location
    drop_off_location: Location
    pickup_time: datetime
    deadline: datetime | None
    expedited: bool
    confirmation_required: str
    package_info: PackageInfo


class DeliveryOut(DeliveryAccepted):
    status_reason: str | None
    drone_id: UUID | None
    last_known_location: Location | None
    pickup_eta: datetime | None = Field(
        description="When a drone is expected at the pickup (an estimate while waiting)"
    )
    waiting_since: datetime | None = Field(description="When it first joined the drones' waiting line")
    drone_scheduled_at: datetime | None = Field(description="When its drone was reserved")
    created_at: datetime
    updated_at: datetime


class ConfirmationTokenOut(CamelSchema):
    confirmation_token: str = Field(
        description="The task token to send back with the confirmation: single-use, shown only in this answer"
    )


class DeliveryPage(CamelSchema):
    items: list[DeliveryOut]
    count: int


class DeliveryStatusOut(CamelSchema):
    status: str
    status_reason: str | None
    last_known_location: Location | None
    pickup_eta: datetime | None
    delivery_eta: datetime | None


class SubscriberHandling(CamelSchema):
    subscriber: str
    outcome: Literal["processed", "dead_lettered", "pending"]
    at: datetime | None
    reason: str | None


class TimelineEvent(CamelSchema):
    type: str
    version: int
    occurred_at: datetime
    published_by: str
    message_id: UUID
    causation_id: UUID | None
    stream: str
    sequence: int
    relayed_at: datetime | None
    subscribers: list[SubscriberHandling]
