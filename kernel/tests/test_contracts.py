"""An event's type and version are declared once, by the app that publishes it (outbox.core.contracts)."""

import pytest
from outbox_tests.probe.events import ProbePinged

from outbox.core import contracts
from outbox.core.contracts import Event

# A subscriber's own copy of its publisher's contract, in a module of its own, under the same name.
A_COPY = """
class ProbePinged(Event):
    type = "probe.pinged"
    version = 1
    n: int
"""


def test_a_copy_of_a_contract_in_another_module_is_refused_even_under_the_same_name():
    """The natural mistake, a subscriber declaring its publisher's contract again with the same
    class name, silently replaced the publisher's for the whole process: the refusal compared
    class names only."""
    key = (ProbePinged.type, ProbePinged.version)
    try:
        with pytest.raises(TypeError, match="event probe.pinged v1 is already declared by outbox_tests.probe.events"):
            exec(A_COPY, {"Event": Event, "__name__": "billing.contracts"})  # noqa: S102 (the copy's module)
    finally:
        replaced, contracts._contracts[key] = contracts._contracts[key], ProbePinged

    assert replaced is ProbePinged
