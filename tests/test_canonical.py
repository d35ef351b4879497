"""Call identity: RFC 8785 canonical JSON (the RFC's own examples), fingerprints and redaction."""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal
from enum import Enum, IntEnum
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_loopguard.canonical import REDACTED, CanonicalError, canonical_json, fingerprint, redact


def test_rfc8785_section_3_2_2_sample() -> None:
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(value).decode("utf-8") == expected


def test_rfc8785_section_3_2_3_sorting_by_utf16_code_units() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys = list(json.loads(canonical_json(value)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


# RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical text.
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize("bits,text", APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, text: str) -> None:
    number = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical_json(number).decode() == text
    assert canonical_json([number]).decode() == f"[{text}]"


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits: str) -> None:
    with pytest.raises(CanonicalError, match="NaN and Infinity"):
        canonical_json({"x": struct.unpack(">d", bytes.fromhex(bits))[0]})


class Color(Enum):
    RED = "red"


@pytest.mark.parametrize(
    "value,needle",
    [
        (b"bytes", "bytes is not a JSON value"),
        ({1, 2}, "set is not a JSON value"),
        (object(), "object is not a JSON value"),
        (Decimal("1.5"), "Decimal is not a JSON value"),
        (Color.RED, "Color is not a JSON value"),
        ({1: "a"}, "key 1 is not a string"),
        ({"x": 2**53}, "outside the range"),
        ({"x": "\ud800"}, "lone surrogate"),
    ],
)
def test_non_json_values_are_refused_with_a_clear_error(value: Any, needle: str) -> None:
    with pytest.raises(CanonicalError, match=needle):
        canonical_json(value)


def test_circular_value_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CanonicalError):
        canonical_json(loop)


def test_key_order_and_number_spelling_do_not_change_the_action() -> None:
    a = fingerprint("pay", {"customer": "c-1", "amount": 5, "meta": {"b": 1, "a": [1.0, 2]}})
    b = fingerprint("pay", {"meta": {"a": [1, 2.0], "b": 1.0}, "amount": 5.0, "customer": "c-1"})
    assert a == b


@pytest.mark.parametrize(
    "other",
    [
        {"customer": "c-2", "amount": 5},
        {"customer": "c-1", "amount": 6},
        {"customer": "c-1"},
        {"customer": "c-1", "amount": 5, "note": None},
        {"customer": "c-1", "amount": "5"},
    ],
)
def test_every_field_that_changes_meaning_changes_the_fingerprint(other: dict[str, Any]) -> None:
    assert fingerprint("pay", {"customer": "c-1", "amount": 5}) != fingerprint("pay", other)
    assert fingerprint("pay", {"customer": "c-1", "amount": 5}) != fingerprint(
        "refund", {"customer": "c-1", "amount": 5}
    )


def test_int_enum_and_str_subclasses_are_their_plain_values() -> None:
    class Level(IntEnum):
        HIGH = 3

    assert canonical_json({"level": Level.HIGH}) == b'{"level":3}'


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)


def _no_surrogates(value: Any) -> bool:
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return all(_no_surrogates(v) for v in value)
    if isinstance(value, dict):
        return all(_no_surrogates(k) and _no_surrogates(v) for k, v in value.items())
    return True


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_fast_path_equals_the_rfc8785_reference(value: Any) -> None:
    if not _no_surrogates(value):
        with pytest.raises(CanonicalError):
            canonical_json(value)
        return
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=6))
def test_canonical_output_parses_back_to_the_same_data(value: dict[str, Any]) -> None:
    try:
        text = canonical_json(value)
    except CanonicalError:
        assert not _no_surrogates(value) or any(abs(v) > 2**53 - 1 for v in value.values() if isinstance(v, int))
        return
    assert json.loads(text) == value


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_integral_floats_equal_their_integers(number: float) -> None:
    if number.is_integer() and abs(number) <= 2**53 - 1:
        assert canonical_json(number) == canonical_json(int(number))
    assert not math.isnan(json.loads(canonical_json(number)))


# --- redaction --------------------------------------------------------------------------------------------


def test_redact_removes_credentials_by_key_pattern_and_registered_value() -> None:
    value = {
        "query": "weather",
        "api_key": "k-123",
        "Authorization": "Bearer abc.def.ghi",
        "nested": [{"password": "hunter2"}, {"client_secret": "s3"}, "call with sk-abcdefghijklmnopqrstuv now"],
        "url": "https://bob:pa55w0rd@example.test/x",
        "note": "my pin is 4242 ok",
        "max_tokens": 100,
        "next_page_token": "cursor-7",
    }
    out = redact(value, secrets=["4242"])
    text = json.dumps(out)
    for secret in ("k-123", "abc.def.ghi", "hunter2", 's3"', "sk-abcdefghijklmnopqrstuv", "pa55w0rd", "4242"):
        assert secret not in text, secret
    assert out["query"] == "weather" and out["max_tokens"] == 100
    assert out["api_key"] == REDACTED
    assert out["note"] == f"my pin is {REDACTED} ok"


def test_redact_never_raises_on_odd_values() -> None:
    out = redact({"a": b"bytes", "b": {1, 2}, "c": object(), "d": float("nan")})
    assert isinstance(out, dict) and out["b"] == [1, 2]
    json.dumps(out)
