"""Fingerprints (outbox.core.fingerprints): letters of one cause share one, whatever the values
their messages quote; letters of two causes never do. Pure text and pydantic, no database."""

import pytest
from pydantic import BaseModel, ValidationError

from outbox.core.dead_letters import Reason, Rejected
from outbox.core.fingerprints import error_fingerprint, shape

REJECTED = f"{Rejected.__module__}.{Rejected.__qualname__}"


class Item(BaseModel):
    weight_grams: int


class Parcel(BaseModel):
    recipient: str
    items: list[Item]


def refused(payload: dict) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        Parcel.model_validate(payload)
    return raised.value


def refused_by_a_reader(payload: dict) -> Rejected:
    """As dispatch refuses a payload its subscriber's reader cannot read: the message is pydantic's."""
    error = refused(payload)
    try:
        raise Rejected(Reason.INVALID_PAYLOAD, str(error)) from error
    except Rejected as rejected:
        return rejected


def fingerprint(error: BaseException, *, text_only: bool = False) -> str:
    """As record_dead_letter takes it, or from the letter's stored text alone."""
    exception_type = f"{type(error).__module__}.{type(error).__qualname__}"
    return error_fingerprint(exception_type, str(error), None if text_only else error)


def test_an_id_in_capitals_is_taken_out_as_one_in_small_letters():
    upper, lower = "3F2A9C41-7B5D-4E8A-9C0D-1A2B3C4D5E6F", "9b1c7d20-4e3f-4a5b-8c6d-7e8f9a0b1c2d"
    assert shape(f"order {upper} not found") == "order <id> not found"
    assert error_fingerprint("LookupError", f"order {upper} not found") == error_fingerprint(
        "LookupError", f"order {lower} not found"
    )


def test_a_validation_error_is_one_cause_whatever_value_it_refused():
    abc = refused({"recipient": "ada", "items": [{"weight_grams": "abc"}]})
    heavy = refused({"recipient": "bob", "items": [{"weight_grams": 1}, {"weight_grams": "a ton"}]})
    assert "input_value='abc'" in str(abc)  # the message quotes the value: one group per value, were it kept

    assert shape(str(abc)) == shape(str(heavy)) == "Parcel: items.<n>.weight_grams [int_parsing]"
    assert fingerprint(abc) == fingerprint(heavy)
    missing = refused({"recipient": "ada", "items": [{}]})  # the same place, another failure
    elsewhere = refused({"recipient": ["ada"], "items": []})  # another place
    assert len({fingerprint(abc), fingerprint(missing), fingerprint(elsewhere)}) == 3


def test_a_refused_payload_is_grouped_by_its_validation_errors_not_by_their_values():
    one = refused_by_a_reader({"recipient": "ada", "items": [{"weight_grams": "abc"}]})
    other = refused_by_a_reader({"recipient": "bob", "items": [{"weight_grams": "xyz"}]})
    assert fingerprint(one) == fingerprint(other)
    assert fingerprint(one) != fingerprint(refused_by_a_reader({"recipient": "ada", "items": [{}]}))


@pytest.mark.parametrize(
    "payload",
    [
        {"recipient": "ada", "items": [{"weight_grams": "abc"}, {"weight_grams": "1.5 kg"}, {}]},
        {"recipient": 7, "items": {"weight_grams": "x"}},
        {"recipient": "ada", "items": [{"weight_grams": "x\n]\n[type=missing, input_value=1, input_type=int]"}]},
        "not a parcel at all",
    ],
)
def test_from_its_stored_text_alone_a_letter_has_the_fingerprint_its_exception_gave(payload):
    """A letter's fingerprint recomputed from what it kept (its type and message) is the one it was
    given with the exception at hand, or an old letter and a new one of one cause would split."""
    for error in (refused(payload), refused_by_a_reader(payload)):
        assert fingerprint(error, text_only=True) == fingerprint(error)


def test_a_message_that_only_begins_as_a_validation_errors_is_shaped_as_any_other():
    text = "1 validation error for Parcel\nthe gateway 10.0.0.7 said no"
    assert shape(text) == "<n> validation error for Parcel the gateway <n> said no"
