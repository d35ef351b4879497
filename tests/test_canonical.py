"""Call identity: RFC 8785 canonical JSON (the RFC's own examples), fingerprints and redaction."""

from __future__ import annotations

import json
import math
import struct
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from enum import Enum, IntEnum
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_loopguard.values import canonical
from agents_loopguard.values.canonical import REDACTED, CanonicalError, canonical_json, fingerprint, redact

ENCODERS = ["json", "orjson"]
"""Every test that takes ``encoder`` runs once with the standard library's encoder and once with orjson."""


@contextmanager
def using(encoder: str) -> Iterator[None]:
    """canonical_json with the named encoder chosen (the module's choice, not the library, is swapped)."""
    chosen = canonical._new_encoder
    canonical._new_encoder = canonical._ENCODERS[encoder]
    try:
        yield
    finally:
        canonical._new_encoder = chosen


def test_orjson_is_the_encoder_when_installed_and_agrees_with_the_reference() -> None:
    assert orjson.__version__  # installed by the [dev] and [fast] extras
    assert canonical._new_encoder is canonical._ENCODERS["orjson"] is canonical._Orjson


def test_an_encoder_that_misspells_a_probe_is_not_used() -> None:
    class Careless(canonical._Orjson):
        differs = (0.0, 0.0)  # claims orjson writes 0.0000048 as ECMAScript does; it writes 4.8e-6

    assert canonical._agrees(canonical._Orjson)
    assert not canonical._agrees(Careless)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_rfc8785_section_3_2_2_sample(encoder: str) -> None:
    """Rules: R5 (call identity)."""
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    with using(encoder):
        assert canonical_json(value).decode("utf-8") == expected


@pytest.mark.parametrize("encoder", ENCODERS)
def test_rfc8785_section_3_2_3_sorting_by_utf16_code_units(encoder: str) -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    with using(encoder):
        keys = list(json.loads(canonical_json(value)))
        nested = list(json.loads(canonical_json({"outer": [{"inner": value}]}))["outer"][0]["inner"])
    assert keys == nested == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


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


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("bits,text", APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, text: str, encoder: str) -> None:
    number = struct.unpack(">d", bytes.fromhex(bits))[0]
    with using(encoder):
        assert canonical_json(number).decode() == text
        assert canonical_json([number]).decode() == f"[{text}]"
        assert canonical_json({"n": number}).decode() == f'{{"n":{text}}}'


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits: str, encoder: str) -> None:
    """Rules: R5 (call identity)."""
    with using(encoder), pytest.raises(CanonicalError, match=r"^\$\.x: .* is not a JSON number \(NaN and Infinity"):
        canonical_json({"x": struct.unpack(">d", bytes.fromhex(bits))[0]})


class Color(Enum):
    RED = "red"


LONE_SURROGATE = "^a string contains a lone surrogate, which is not valid Unicode$"


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize(
    "value,needle",
    [
        (b"bytes", "bytes is not a JSON value"),
        ({1, 2}, "set is not a JSON value"),
        (object(), "object is not a JSON value"),
        (Decimal("1.5"), "Decimal is not a JSON value"),
        (Color.RED, "Color is not a JSON value"),
        (orjson.Fragment(b"1"), "Fragment is not a JSON value"),
        ({1: "a"}, "key 1 is not a string"),
        ({"a": 5.0, 1: "a"}, "key 1 is not a string"),
        ({"x": 2**53}, r"^\$\.x: integer 9007199254740992 is outside the range"),
        ({"x": [1e-5, -(2**53)]}, r"^\$\.x\[1\]: integer -9007199254740992 is outside the range"),
        ({"x": "\ud800"}, LONE_SURROGATE),
        ({"x": "\ud800", "n": 1e-5}, LONE_SURROGATE),
        ({"\udfff": 1}, LONE_SURROGATE),
        ({"\ud800\U0001f600": 1, "\uff01": 2}, LONE_SURROGATE),  # a key that also needs UTF-16 ordering
    ],
)
def test_non_json_values_are_refused_with_a_clear_error(value: Any, needle: str, encoder: str) -> None:
    """Rules: R5 (call identity)."""
    with using(encoder), pytest.raises(CanonicalError, match=needle):
        canonical_json(value)


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("impostor", ["\udc000", "\udc00", "\udc001", "x\udc000"])
def test_a_string_that_looks_like_an_internal_placeholder_is_a_lone_surrogate(impostor: str, encoder: str) -> None:
    # The standard library path writes ECMAScript-only numbers through placeholders starting with U+DC00.
    with using(encoder), pytest.raises(CanonicalError, match=LONE_SURROGATE):
        canonical_json({"a": 1e-5, "b": impostor, "c": [2.5e-7]})


@pytest.mark.parametrize("encoder", ENCODERS)
def test_circular_value_is_refused(encoder: str) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with using(encoder), pytest.raises(CanonicalError, match="nesting deeper than 200 levels"):
        canonical_json(loop)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_nesting_is_accepted_to_200_levels_and_refused_beyond(encoder: str) -> None:
    with using(encoder):
        assert canonical_json(nest([5.0], 200)) == rfc8785.dumps(nest([5], 200))
        with pytest.raises(CanonicalError, match="nesting deeper than 200 levels"):
            canonical_json(nest([5.0], 201))


def test_key_order_and_number_spelling_do_not_change_the_action() -> None:
    """Rules: R5 (call identity)."""
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
    """Rules: R5 (call identity)."""
    assert fingerprint("pay", {"customer": "c-1", "amount": 5}) != fingerprint("pay", other)
    assert fingerprint("pay", {"customer": "c-1", "amount": 5}) != fingerprint(
        "refund", {"customer": "c-1", "amount": 5}
    )


class Level(IntEnum):
    HIGH = 3


class Tone(str, Enum):
    WARM = "warm"


class Ratio(float):
    pass


@pytest.mark.parametrize("encoder", ENCODERS)
def test_int_enum_and_str_subclasses_are_their_plain_values(encoder: str) -> None:
    value = {
        "level": Level.HIGH,
        "tone": Tone.WARM,  # its characters, not str(Tone.WARM) == "Tone.WARM"
        Tone.WARM: [Ratio(5.0), Ratio(1e-5)],
        "ordered": OrderedDict([("b", 1), ("a", (2.0, 3))]),
    }
    expected = b'{"level":3,"ordered":{"a":[2,3],"b":1},"tone":"warm","warm":[5,0.00001]}'
    with using(encoder):
        assert canonical_json(value) == expected == rfc8785.dumps(value)


def nest(value: Any, levels: int) -> Any:
    """``value`` inside ``levels`` containers, alternating lists and objects."""
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


def around(number: float) -> list[float]:
    return [number, math.nextafter(number, 0.0), math.nextafter(number, math.inf)]


# Where Python's repr, orjson and ECMAScript part ways: integral floats, |x| < 1e-4 and 1e16 <= |x| < 1e21.
EDGES = [x for edge in (1e-10, 1e-9, 1e-7, 1e-6, 1e-5, 1e-4, 2.0**53, 1e16, 1e21) for x in around(edge)]
hard_floats = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**70), 2**70).map(float)  # integral, also beyond 2**53 and 2**64
    | st.floats(min_value=1e-12, max_value=1e-3)  # small: 1e-05 in Python, 0.00001 in ECMAScript
    | st.floats(min_value=1e15, max_value=1e23)  # large: 1e+16 in Python, 10000000000000000 in ECMAScript
    | st.sampled_from(EDGES)
).flatmap(lambda x: st.sampled_from([x, -x]))

# Keys that share prefixes and mix U+E000-U+FFFF with characters outside the BMP, whose UTF-16 order differs.
KEY_CHARS = ["a", "b", "\x00", '"', "\\", "\x7f", "\u00e9", "\ud7ff", "\ue000", "\uff01", "\uffff", "\U00010000"]
KEY_CHARS += ["\U0001f600", "\U0010ffff"]
keys = st.text(st.sampled_from(KEY_CHARS), max_size=4) | st.text(max_size=6)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | hard_floats
    | st.text()
    | st.text(st.sampled_from(KEY_CHARS)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
    max_leaves=25,
)


def depth(value: Any) -> int:
    """How many containers deep ``value`` goes (a scalar: 0)."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(depth, children), default=0)


# Up to the 200 levels canonical_json accepts (the root container is level 0).
deep_values = st.tuples(json_values, st.integers(0, 201)).map(lambda pair: nest(pair[0], pair[1] - depth(pair[0])))


@pytest.mark.parametrize("encoder", ENCODERS)
@settings(max_examples=600, deadline=None)
@given(value=json_values)
def test_fast_path_equals_the_rfc8785_reference(value: Any, encoder: str) -> None:
    with using(encoder):
        assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("encoder", ENCODERS)
@settings(max_examples=100, deadline=None)
@given(value=deep_values)
def test_deeply_nested_values_equal_the_rfc8785_reference(value: Any, encoder: str) -> None:
    assert depth(value) <= 201
    with using(encoder):
        assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("encoder", ENCODERS)
@settings(max_examples=500, deadline=None)
@given(number=hard_floats)
def test_every_float_is_spelled_as_the_rfc8785_reference_spells_it(number: float, encoder: str) -> None:
    with using(encoder):
        assert canonical_json(number) == canonical_json([number])[1:-1] == rfc8785.dumps(number)
    assert canonical._ecmascript(number).encode() == rfc8785.dumps(number)


@pytest.mark.parametrize("encoder", ENCODERS)
@settings(max_examples=300, deadline=None)
@given(value=json_values, surrogate=st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]), as_key=st.booleans())
def test_a_lone_surrogate_anywhere_is_refused(value: Any, surrogate: str, as_key: bool, encoder: str) -> None:
    bad = {surrogate: value, "\U0001f600": 1.5e-5, "\uff01": 5.0} if as_key else [value, {"s": f"x{surrogate}"}]
    with using(encoder), pytest.raises(CanonicalError, match=LONE_SURROGATE):
        canonical_json(bad)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=6))
def test_canonical_output_parses_back_to_the_same_data(value: dict[str, Any]) -> None:
    try:
        text = canonical_json(value)
    except CanonicalError:
        assert any(abs(v) > 2**53 - 1 for v in value.values() if isinstance(v, int))
        return
    assert json.loads(text) == value


@settings(max_examples=200, deadline=None)
@given(hard_floats)
def test_integral_floats_equal_their_integers(number: float) -> None:
    if number.is_integer() and abs(number) <= 2**53 - 1:
        assert canonical_json(number) == canonical_json(int(number))
    assert not math.isnan(json.loads(canonical_json(number)))


# --- redaction --------------------------------------------------------------------------------------------


def test_redact_removes_credentials_by_key_pattern_and_registered_value() -> None:
    """Rules: R4 (trace)."""
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
