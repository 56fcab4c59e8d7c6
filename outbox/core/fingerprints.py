"""The fingerprint of a failure: what its dead letters are grouped by when one cause fails many.

Two letters share it when their errors have the same type and the same message once what differs
from message to message is taken out: ids (UUIDs, long hex strings), timestamps, dates and numbers.
"`Order 3f2a… not found`" and "`Order 9b1c… not found`" are one group; a `KeyError` and a
`TimeoutError` never are. As ServicePulse groups failed messages by exception type and message.
"""

import hashlib
import re

_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?", re.IGNORECASE
)
_UUID = re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.IGNORECASE)  # a token, a digest: at least one digit
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_SPACE = re.compile(r"\s+")


def shape(error: str) -> str:
    """The error's message with what varies from one message to the next taken out."""
    text = _TIMESTAMP.sub("<time>", error)
    text = _UUID.sub("<id>", text)
    text = _HEX.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:1000]


def error_fingerprint(exception_type: str, error: str) -> str:
    """Sixteen hex digits naming the error's type and its message's shape."""
    return hashlib.sha256(f"{exception_type}\n{shape(error)}".encode()).hexdigest()[:16]
