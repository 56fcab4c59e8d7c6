"""What a client is told about a field the API's schemas refused: a short rule in the API's own
words ("must be a UUID"), where pydantic would say how its parser failed ("invalid character:
found `n` at 0") or what Python calls the type ("a valid dictionary or object to extract fields
from"). A schema's own validator already speaks to the client, and is passed on as it is."""

DATE_TIME = "must be an ISO 8601 date-time string, like 2026-12-07T10:00:00Z"
RULES = {
    "missing": "required",
    "extra_forbidden": "not a field of this request",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "list_type": "must be a JSON array",
    "uuid_type": "must be a UUID, like 3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "uuid_parsing": "must be a UUID, like 3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "uuid_version": "must be a UUID, like 3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "datetime_type": DATE_TIME,
    "datetime_parsing": DATE_TIME,
    "datetime_from_date_parsing": DATE_TIME,
    "datetime_object_invalid": DATE_TIME,
    "timezone_aware": "must say its time zone (Z or an offset like +02:00)",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
}
BOUNDS = {
    "greater_than": "more than",
    "greater_than_equal": "at least",
    "less_than": "less than",
    "less_than_equal": "at most",
}
OWN_WORDS = ("Value error, ", "Assertion failed, ")  # pydantic's prefix to a validator's own message


def field_error_message(error: dict) -> str:
    """The message for one of pydantic's errors (an item of `ValidationError.errors()`)."""
    kind, context, message = error.get("type", ""), error.get("ctx") or {}, error.get("msg", "invalid")
    if kind == "datetime_from_date_parsing" and "outside expected range" in str(context.get("error")):
        return f"{DATE_TIME} ({context['error']})"  # the one parser detail a client can act on
    if kind in RULES:
        return RULES[kind]
    if kind in BOUNDS and len(context) == 1:
        return f"must be {BOUNDS[kind]} {next(iter(context.values()))}"
    if kind in ("enum", "literal_error") and "expected" in context:
        return f"must be one of {context['expected']}"
    for prefix in OWN_WORDS:
        if message.startswith(prefix):
            return message.removeprefix(prefix)
    return message.replace("Input should be", "must be", 1)
