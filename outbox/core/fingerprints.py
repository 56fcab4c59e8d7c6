"""The fingerprint of a failure: what its dead letters are grouped by when one cause fails many.

Two letters share it when their errors have the same type and the same message once what differs
from message to message is taken out: ids (UUIDs, long hex strings), timestamps, dates and numbers.
"`Order 3f2a… not found`" and "`Order 9b1c… not found`" are one group; a `KeyError` and a
`TimeoutError` never are. As ServicePulse groups failed messages by exception type and message.
A validation error's message quotes each value it refused (`input_value='abc'`): it is grouped by
where and what failed instead, pydantic's location and error type of each, read from the exception
when it is at hand and from its message when only the text is (a letter's stored error).
"""

import hashlib
import re

from pydantic import ValidationError

_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?", re.IGNORECASE
)
_UUID = re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.IGNORECASE)  # a token, a digest: at least one digit
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_SPACE = re.compile(r"\s+")

# Pydantic's message: a title, then for each error its location (left out when empty), the message
# indented with `[type=..., input_value=..., input_type=...]` (or `[type=...]`), and a link to its docs.
_VALIDATION_TITLE = re.compile(r"(\d+) validation errors? for (.*)")
_VALIDATION_ERROR = re.compile(r"  \S.*?\[type=(\w+)(?:, .*)?\]")  # its first `[type=`: the value comes after
_VALIDATION_LINK = re.compile(r"    For further information visit \S+")


def shape(error: str) -> str:
    """The error's message with what varies from one message to the next taken out."""
    validation = _validation_errors_in(error)
    if validation is not None:
        return _validation_shape(*validation)
    return _varying_taken_out(error)


def error_fingerprint(exception_type: str, error: str, exception: BaseException | None = None) -> str:
    """Sixteen hex digits naming the error's type and its message's shape; a validation error's,
    with the exception at hand, from pydantic's own list of its errors rather than from its text."""
    refused = _validation_error(exception) if exception is not None else None
    if refused is not None:
        errors = [(_location(e["loc"]), e["type"]) for e in refused.errors(include_url=False)]
        text = _validation_shape(refused.title, errors)
    else:
        text = shape(error)
    return hashlib.sha256(f"{exception_type}\n{text}".encode()).hexdigest()[:16]


def _varying_taken_out(text: str) -> str:
    text = _TIMESTAMP.sub("<time>", text)
    text = _UUID.sub("<id>", text)
    text = _HEX.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:1000]


def _validation_shape(title: str, errors: list[tuple[str, str]]) -> str:
    """Where and what failed, each once: `Payload: items.<n>.weight [int_parsing]; name [missing]`."""
    where = dict.fromkeys(_varying_taken_out(f"{location} [{kind}]") for location, kind in errors)
    return _varying_taken_out(f"{title}: {'; '.join(where)}")


def _validation_error(exception: BaseException) -> ValidationError | None:
    """The validation error whose message the failure is: `exception`, or the one it was raised
    from with that message (a refused payload, `Rejected(INVALID_PAYLOAD, str(error)) from error`)."""
    for candidate in (exception, exception.__cause__):
        if isinstance(candidate, ValidationError) and str(candidate) == str(exception):
            return candidate
    return None


def _location(loc: tuple) -> str:
    """A location as pydantic's message writes it: `items.0.weight`, a key with a dot in backticks."""
    return ".".join(f"`{part}`" if isinstance(part, str) and "." in part else str(part) for part in loc)


def _validation_errors_in(error: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(title, [(location, type)]) when `error` is a validation error's message, else None."""
    lines = error.strip().splitlines()
    title = _VALIDATION_TITLE.fullmatch(lines[0]) if lines else None
    if title is None:
        return None
    errors, location = [], ""
    for line in lines[1:]:
        if _VALIDATION_LINK.fullmatch(line):
            continue
        if found := _VALIDATION_ERROR.fullmatch(line):
            errors.append((location, found[1]))
            location = ""
        elif line and not line.startswith(" ") and not location:
            location = line
        else:
            return None  # not pydantic's shape after all: the generic one is taken
    return (title[2], errors) if len(errors) == int(title[1]) and not location else None
