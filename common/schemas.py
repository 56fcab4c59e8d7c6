"""The JSON shapes every app's part of the REST API shares: camelCase on the wire, a request that
names an unknown field refused, and the one shape of an error, which names the field at fault."""

from ninja import Schema
from pydantic import ConfigDict
from pydantic.alias_generators import to_camel


class CamelSchema(Schema):
    # NaN and Infinity are valid Python JSON but no coordinate or weight.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, allow_inf_nan=False)


class RequestSchema(CamelSchema):
    """What a client sends, by the names the schema states: an unknown field (snake_case included)
    is a mistake to point out, not to ignore."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)


class FieldError(CamelSchema):
    field: str
    message: str


class ErrorOut(CamelSchema):
    detail: str
    errors: list[FieldError] = []


# The error answers an operation may give, each in the shape above (its OpenAPI responses).
ERRORS = {status: ErrorOut for status in (400, 401, 403, 404, 409, 413, 415, 422, 429, 503)}
