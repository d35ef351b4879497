"""Call identity: canonical JSON (RFC 8785), the call fingerprint, and redaction of secrets.

Two calls are the same action when their canonical JSON is the same: key order never matters, ``5`` and ``5.0``
are one number, and every argument stays in the fingerprint (an amount or a customer id is never "noise").
Values that JSON cannot carry (NaN, Infinity, bytes, sets, arbitrary objects, non-string keys, integers beyond
IEEE-754's exact range, lone surrogates) are refused with :class:`CanonicalError` instead of being coerced.

How it is fast: one walk validates the value and, on the way, rewrites the few parts a C JSON encoder would write
differently from RFC 8785, so the encoder's output *is* RFC 8785:

- an integral float becomes the integer ECMAScript prints (``5.0`` -> ``5``, ``-0.0`` -> ``0``);
- a float the encoder spells otherwise (Python writes ``1e-05`` where ECMAScript writes ``0.00001``) is written
  as verbatim text, ECMAScript's layout of Python's digits (:func:`_ecmascript`; the ``rfc8785`` reference's
  formatter does the same at about 5 us a number, too slow for values full of such floats);
- an object whose keys sort differently by UTF-16 code units than by code points (a key outside the BMP next to
  one in U+E000-U+FFFF) is written verbatim in UTF-16 order;
- subclasses (an ``IntEnum``, a ``str`` enum, an ``OrderedDict``) become their plain JSON value.

The encoder is ``orjson`` when it is installed (``pip install 'agents-loopguard[fast]'``) and writes a set of probe
values exactly as the ``rfc8785`` reference does (checked once, at import); otherwise the standard library's.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import hmac
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import rfc8785

try:
    import orjson
except ImportError:  # the [fast] extra is not installed: the standard library's encoder writes
    orjson = None  # type: ignore[assignment]

__all__ = [
    "REDACTED",
    "CanonicalError",
    "canonical_json",
    "fingerprint",
    "operation_id_problem",
    "redact",
]

REDACTED = "[redacted]"

_MAX_SAFE_INT = 2**53 - 1
_MAX_EXACT_FLOAT = 2.0**53  # an integral float up to this is exactly its int, which ECMAScript prints digit for digit
_MAX_DEPTH = 200
_INFINITIES = (float("inf"), float("-inf"))
_LONE_SURROGATE = "a string contains a lone surrogate, which is not valid Unicode"


class CanonicalError(ValueError):
    """The value cannot be written as canonical JSON (RFC 8785); the message says which part and why."""


class _Invalid(Exception):
    """Internal: the value is not JSON data; :func:`_explain` says why."""


# --- the walk: validate, and rewrite what the encoder would write otherwise ---------------------------------


class _Encoder(Protocol):
    """A JSON encoder driven to write RFC 8785 from a value :func:`_normalize` prepared for it."""

    declines: tuple[type[Exception], ...]
    """Errors on which the standard library's encoder redoes the value (and names the problem)."""

    differs: tuple[float, float]
    """The magnitudes ``low <= |x| < high`` where the encoder spells a non-integral float unlike ECMAScript."""

    def verbatim(self, text: str) -> Any:
        """A stand-in the encoder writes as ``text``, unquoted."""

    def ordered_object(self, obj: dict[str, Any]) -> Any:
        """A stand-in the encoder writes as this (normalized) object with its keys in their present order."""

    def write(self, value: Any) -> bytes:
        """The UTF-8 JSON of the normalized value, keys sorted."""


def _normalize(value: Any, encoder: _Encoder, depth: int) -> Any:
    """``value`` as ``encoder`` must see it to write RFC 8785: the same object wherever nothing changes.

    Raises :class:`_Invalid` for what JSON cannot carry; builds no message (:func:`_explain` walks again for it).
    """
    kind = type(value)
    if kind is dict:
        return _object(value, encoder, depth)
    if kind is list or kind is tuple:
        return _array(value, encoder, depth)
    if kind is float:
        return _number(value, encoder)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            return value
        raise _Invalid
    return _subclass(value, encoder, depth)


def _object(obj: dict[Any, Any], encoder: _Encoder, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _Invalid
    result = obj  # copied on the first change
    plain_keys = True
    high_keys = False
    for key, item in obj.items():
        if type(key) is not str:
            plain_keys = False
        elif not key.isascii() and _HIGH_BMP.search(key):
            high_keys = True  # the UTF-16 order of the keys may differ: see _in_utf16_order
        kind = type(item)
        if kind is str or kind is bool or item is None or (kind is int and -_MAX_SAFE_INT <= item <= _MAX_SAFE_INT):
            continue  # the scalars every encoder writes as RFC 8785 does, checked inline: they are most of a value
        new = _number(item, encoder) if kind is float else _normalize(item, encoder, depth + 1)
        if new is not item:
            if result is obj:
                result = obj.copy()
            result[key] = new
    if not plain_keys:
        result = {_plain_key(key): item for key, item in result.items()}
    elif not high_keys:
        return result
    return _in_utf16_order(result, encoder)


def _array(array: list[Any] | tuple[Any, ...], encoder: _Encoder, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _Invalid
    copy: list[Any] | None = None  # made on the first change
    for index, item in enumerate(array):
        kind = type(item)
        if kind is str or kind is bool or item is None or (kind is int and -_MAX_SAFE_INT <= item <= _MAX_SAFE_INT):
            continue
        new = _number(item, encoder) if kind is float else _normalize(item, encoder, depth + 1)
        if new is not item:
            if copy is None:
                copy = list(array)
            copy[index] = new
    return array if copy is None else copy


def _number(value: float, encoder: _Encoder) -> Any:
    if not value.is_integer():  # nor NaN, nor infinite
        if 1e-4 <= value < 1e16 or -1e16 < value <= -1e-4:
            return value  # the common case: Python, orjson and ECMAScript all write it in fixed notation, alike
        if value != value or value in _INFINITIES:
            raise _Invalid
        low, high = encoder.differs
        return encoder.verbatim(_ecmascript(value)) if low <= abs(value) < high else value
    if -_MAX_EXACT_FLOAT <= value <= _MAX_EXACT_FLOAT:
        return int(value)  # exactly the integer, which ECMAScript prints digit for digit: 5.0 -> 5, -0.0 -> 0
    if -1e21 < value < 1e21:
        return encoder.verbatim(_ecmascript(value))  # digits then zeros: 2.0**60 -> 1152921504606847000
    return value  # from 1e21 on, both encoders write ECMAScript's "1e+21" (the import-time probes check it)


def _ecmascript(number: float) -> str:
    """ECMAScript's ``Number::toString`` of a finite float, as RFC 8785 section 3.2.2.3 requires.

    Python's repr has the same digits (the fewest that read back as the same float, the closest one on a tie) and,
    from 1e-4 to 1e16, the same fixed layout but for an integral float's ``.0``. Beyond, Python writes ``d.ddde-05``
    where ECMAScript writes fixed notation down to 1e-6 and up to 1e21, and exponents without padding. The tests
    hold it equal to the ``rfc8785`` reference on arbitrary floats.

    >>> [_ecmascript(x) for x in (5.0, 1e-05, -1.5e-06, 1e-07, 1.5e16, 1e21, -0.0001234)]
    ['5', '0.00001', '-0.0000015', '1e-7', '15000000000000000', '1e+21', '-0.0001234']
    """
    if number == 0:
        return "0"
    text = repr(number)
    if "e" not in text:
        return text[:-2] if text.endswith(".0") else text
    sign, text = ("-", text[1:]) if number < 0 else ("", text)
    mantissa, _, power = text.partition("e")
    exponent = int(power)
    if -7 < exponent < 0:  # 1e-6 <= |number| < 1e-4 (Python writes fixed notation from 1e-4 on)
        return f"{sign}0.{'0' * (-exponent - 1)}{mantissa.replace('.', '')}"
    if 0 < exponent < 21:  # 1e16 <= |number| < 1e21: an integer, its digits and then zeros
        digits = mantissa.replace(".", "")
        return f"{sign}{digits}{'0' * (exponent + 1 - len(digits))}"
    return f"{sign}{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


def _in_utf16_order(obj: dict[str, Any], encoder: _Encoder) -> Any:
    """``obj`` to be written with its keys in UTF-16 order, as RFC 8785 sorts them.

    That order parts from the encoders' code-point order only where a key outside the BMP (from U+10000, written as
    surrogates D800-DFFF) meets one in U+E000-U+FFFF, so most objects stay as they are.
    """
    keys = "".join(obj)
    if not _HIGH_BMP.search(keys) or not _ASTRAL.search(keys):
        return obj
    return encoder.ordered_object({key: obj[key] for key in sorted(obj, key=_utf16)})


_encode_utf16 = codecs.getencoder("utf-16-be")  # looked up once: str.encode's lookup by name costs more than encoding


def _utf16(key: str) -> bytes:
    return _encode_utf16(key, "surrogatepass")[0]  # a lone surrogate sorts here and is refused when written


_HIGH_BMP = re.compile("[\ue000-\uffff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _plain_key(key: Any) -> str:
    if isinstance(key, str):
        return str.__str__(key)  # a str subclass (a str enum): its characters
    raise _Invalid


def _subclass(value: Any, encoder: _Encoder, depth: int) -> Any:
    """Subclasses and other mappings are written as their plain value, as the reference writes them."""
    if isinstance(value, str):
        return str.__str__(value)  # the characters, not ``str(value)`` (a str enum's str() is "Color.RED")
    if isinstance(value, int):
        return _normalize(int(value), encoder, depth)
    if isinstance(value, float):
        return _number(float(value), encoder)
    if isinstance(value, Mapping):
        return _object(dict(value.items()), encoder, depth)
    if isinstance(value, (list, tuple)):
        return _array(list(value), encoder, depth)
    raise _Invalid


def _explain(value: Any, path: str = "$", depth: int = 0) -> str | None:
    """Why ``value`` is not JSON data, naming the offending part (the slow twin of :func:`_normalize`)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            return None
        return f"{path}: integer {value} is outside the range JSON numbers hold exactly (±2**53-1); pass it as a string"
    if isinstance(value, float):
        if value != value or value in _INFINITIES:
            return f"{path}: {value!r} is not a JSON number (NaN and Infinity are refused)"
        return None
    if depth > _MAX_DEPTH:
        return f"{path}: nesting deeper than {_MAX_DEPTH} levels"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: key {key!r} is not a string (JSON object keys are strings)"
            if (problem := _explain(item, f"{path}.{key}", depth + 1)) is not None:
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if (problem := _explain(item, f"{path}[{index}]", depth + 1)) is not None:
                return problem
        return None
    return f"{path}: {type(value).__name__} is not a JSON value (use str, number, bool, None, list, dict)"


# --- the encoders -------------------------------------------------------------------------------------------

_encode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=False
).encode
_encode_in_order = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=False, separators=(",", ":"), check_circular=False
).encode
_CONTAINERS = (dict, list, tuple)

_MARK = "\udc00"
"""Starts a placeholder for verbatim text. It is a lone surrogate, so no valid string contains it."""


class _Stdlib:
    """The standard library's C encoder (the walk leaves no cycle and no depth beyond 200 for it to check).

    Verbatim text rides in placeholder strings (``_MARK`` and an index) replaced after encoding. Python's repr is
    ECMAScript's spelling for every float except integral ones below 1e21 and those in ``1e-9 <= |x| < 1e-4``.
    """

    __slots__ = ("_nested", "_texts")
    declines: tuple[type[Exception], ...] = ()
    differs = (1e-9, 1e-4)  # Python's repr: "1e-05" for 0.00001, "1e-07" for 1e-7

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._nested = 0  # placeholders inside verbatim texts (an ordered object's members)

    def verbatim(self, text: str) -> str:
        self._texts.append(text)
        return f"{_MARK}{len(self._texts) - 1}"

    def ordered_object(self, obj: dict[str, Any]) -> str:
        # One unsorted write in the given order; a container member is written (with its keys sorted) on its own.
        members = {key: self._written(item) if type(item) in _CONTAINERS else item for key, item in obj.items()}
        return self._written(members, _encode_in_order)

    def _written(self, value: Any, encode: Callable[[Any], str] = _encode) -> str:
        text = encode(value)
        self._nested += text.count(_MARK)
        return self.verbatim(text)

    def write(self, value: Any) -> bytes:
        text = _encode(value)
        if self._texts:
            # Each placeholder is written once, here or in a verbatim text; a mark more is a lone surrogate's.
            if text.count(_MARK) + self._nested != len(self._texts):
                raise CanonicalError(_LONE_SURROGATE)
            text = self._substitute(text)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise CanonicalError(_LONE_SURROGATE) from None

    def _substitute(self, text: str) -> str:
        head, *pieces = text.split('"' + _MARK)
        parts = [head]
        for piece in pieces:
            index, tail = piece.split('"', 1)
            verbatim = self._texts[int(index)]
            parts += (self._substitute(verbatim) if _MARK in verbatim else verbatim, tail)
        return "".join(parts)


class _Orjson:
    """``orjson`` on the normalized value, keys sorted by code point (the walk has put UTF-16 order in fragments).

    orjson spells every float as ECMAScript does except integral ones below 1e21 and those in
    ``1e-6 <= |x| < 1e-5`` (``4.8e-6`` for ``0.0000048``); verbatim text is an ``orjson.Fragment``.
    """

    __slots__ = ()
    declines: tuple[type[Exception], ...] = (TypeError,)  # orjson.JSONEncodeError: a lone surrogate

    differs = (1e-6, 1e-5)  # orjson: "4.8e-6" for 0.0000048

    @staticmethod
    def verbatim(text: str) -> Any:
        return orjson.Fragment(text)

    @staticmethod
    def ordered_object(obj: dict[str, Any]) -> Any:
        # orjson without OPT_SORT_KEYS keeps the given order; a container member is written sorted, on its own.
        members = {
            key: orjson.Fragment(orjson.dumps(item, option=orjson.OPT_SORT_KEYS)) if type(item) in _CONTAINERS else item
            for key, item in obj.items()
        }
        return orjson.Fragment(orjson.dumps(members))

    @staticmethod
    def write(value: Any) -> bytes:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _canonical(value: Any, encoder: _Encoder) -> bytes:
    try:
        normalized = _normalize(value, encoder, 0)
    except _Invalid:
        raise CanonicalError(_explain(value) or "value is not JSON data") from None
    except RecursionError as exc:
        raise CanonicalError("value is nested too deeply or contains itself") from exc
    return encoder.write(normalized)


def _probes() -> list[Any]:
    """Values around every boundary where an encoder's number spelling or key order could part from RFC 8785."""
    numbers: list[Any] = [0.0, -0.0, 5.0, 0.1, 333333333.3333333, 1424953923781206.2, 5e-324, 1.7976931348623157e308]
    for edge in (1e-10, 1e-9, 1e-7, 1e-6, 1e-5, 1e-4, 1.0, 2.0**53, 1e16, 1e21, 1e23):
        for number in (edge, math.nextafter(edge, 0), math.nextafter(edge, math.inf), edge * 1.5, edge * 4.123):
            numbers += (number, -number)
    strings = ["\x00\x08\t\n\x0c\r\x1f\x7f", "\"\\/'", "\u0080\u00f6\u20ac\u2028\ufb33\uffff", "\U0001f600"]
    keys: dict[str, Any] = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7, "": 8}
    keys["\uffff"] = [1e-6, {"b": 5.0, "a": keys.copy()}]  # containers inside an object in UTF-16 order
    return [numbers, strings, keys, [keys, [keys]], {"a": {"b": keys}}, -_MAX_SAFE_INT, _MAX_SAFE_INT, None, True]


def _agrees(make: Callable[[], _Encoder]) -> bool:
    """Whether canonical JSON through this encoder is byte for byte the reference's on :func:`_probes`."""
    try:
        return all(_canonical(probe, make()) == rfc8785.dumps(probe) for probe in _probes())
    except Exception:  # an encoder that fails on a probe is not used
        return False


_ENCODERS: dict[str, Callable[[], _Encoder]] = {"json": _Stdlib}
if orjson is not None and _agrees(_Orjson):
    _ENCODERS["orjson"] = _Orjson
_new_encoder: Callable[[], _Encoder] = _ENCODERS.get("orjson", _Stdlib)
"""The encoder for each call: orjson where it agrees with the reference, else the standard library's."""


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` as RFC 8785 canonical JSON (UTF-8 bytes).

    >>> canonical_json({"b": 1, "a": [5.0, "x", 1e-05]})
    b'{"a":[5,"x",0.00001],"b":1}'
    >>> canonical_json({"amount": float("nan")})
    Traceback (most recent call last):
    ...
    agents_loopguard.values.canonical.CanonicalError: $.amount: nan is not a JSON number (NaN and Infinity are refused)
    """
    encoder = _new_encoder()
    try:
        return _canonical(value, encoder)
    except encoder.declines:
        return _canonical(value, _Stdlib())


def fingerprint(tool: str, args: Any, *, key: bytes | None = None) -> str:
    """The identity of a call: sha256 of the canonical JSON of ``{"tool": tool, "args": args}``.

    Every argument takes part, so two calls differing in any field that changes meaning never share one. With a
    ``key`` it is an HMAC-SHA256 instead: a hash is not anonymous (a low-entropy argument can be recovered from a
    plain hash by guessing), a keyed one cannot be guessed without the key. Every worker of a store must use the
    same key, or their fingerprints (and so the ledger's conflict checks) disagree.

    >>> fingerprint("save", {"amount": 5, "order": 42}) == fingerprint("save", {"order": 42, "amount": 5.0})
    True
    >>> fingerprint("save", {"pin": 1234}, key=b"k") != fingerprint("save", {"pin": 1234})
    True
    """
    body = canonical_json({"tool": tool, "args": args})
    if key is not None:
        return hmac.new(key, body, hashlib.sha256).hexdigest()
    return hashlib.sha256(body).hexdigest()


# --- redaction -----------------------------------------------------------------------------------------

_SECRET_KEYS = frozenset(
    {
        "apikey",
        "xapikey",
        "authorization",
        "proxyauthorization",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "token",
        "secret",
        "cookie",
        "setcookie",
        "privatekey",
        "credential",
        "credentials",
        "bearer",
    }
)
_SECRET_SUFFIXES = (
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "apikey",
    "secretkey",
    "accesskey",
    "secretaccesskey",
    "accesstoken",
    "refreshtoken",
    "authtoken",
    "apitoken",
    "oauthtoken",
    "bearertoken",
    "githubtoken",
    "gitlabtoken",
    "slacktoken",
    "bottoken",
    "npmtoken",
    "sessiontoken",
    "idtoken",
    "privatekey",
    "credentials",
    "cookie",
    "signature",
)
"""A key is a credential's when, lowercased without separators, it is one of ``_SECRET_KEYS`` or ends with one of
these (``db_password``, ``x-api-key``, ``aws_secret_access_key``, ``GITHUB_TOKEN`` is ``githubtoken``: see
``_is_secret_key``). The same rule judges a dict's keys and ``key=value`` pairs in text."""

_ASSIGNMENT = re.compile(
    r"(?<![\w-])(?P<key>[A-Za-z][\w.-]{0,63}?)(?P<close>\\?[\"']?)(?P<sep>[ \t]*(?::=|=>|==?|:)[ \t]*)"
    r"(?P<value>\\?\"(?:[^\"\\\n]|\\[^\"])*\\?\"|'[^'\n]*'|"
    r"(?:(?:bearer|basic|token|digest|negotiate|bot)[ \t]+(?=\S))?(?:\[redacted\]|[^\s,;&'\"<>(){}\[\]]+))",
    re.IGNORECASE,
)
"""``key = value`` in free text (error messages, headers, connection and query strings, JSON quoted in a string):
``:``, ``=``, ``:=``, ``=>``, spaces around them, a quoted value (with its spaces, or JSON's escaped quotes) or a bare
one, an ``Authorization`` scheme before it. The value goes when the key is a credential's; the key stays."""

_SECRET_TEXT = re.compile(
    r"(?i:\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,})"  # Authorization header values
    r"|(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"  # user:password@ in URLs
    r"|-----BEGIN[A-Z ]{0,20} PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z ]{0,20} PRIVATE KEY(?: BLOCK)?-----|\Z)"
    # provider formats, after detect-secrets' plugins (Yelp, Apache-2.0) and gitleaks' rules (MIT):
    r"|\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"  # AWS access key ids
    r"|\bgh[pousr]_[A-Za-z0-9_]{36,255}\b"  # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{22,255}\b"  # GitHub fine-grained tokens (gitleaks)
    r"|\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,247}\b"  # Stripe secret and restricted keys
    r"|\bsk-[A-Za-z0-9_-]{12,}"  # OpenAI and other sk- keys
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bgl(?:pat|dt|ft|soat|rt|cbt|ptt)-[A-Za-z0-9_-]{20,64}"  # GitLab tokens
    r"|\bAIza[0-9A-Za-z_-]{35}"  # Google API keys (gitleaks)
    r"|\bnpm_[A-Za-z0-9]{36}\b"  # npm tokens
    r"|\bpypi-AgE[A-Za-z0-9_-]{50,}"  # PyPI tokens
    r"|\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"  # SendGrid keys
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JSON web tokens
    re.DOTALL,
)
"""Credentials recognised by their shape, wherever they appear. Measured with the corpus of
``benchmarks/bench_redaction.py`` (docs/store.md#what-is-redacted)."""


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    norm = "".join(ch for ch in key.lower() if ch.isalnum())
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def _redact_assignments(text: str) -> str:
    """Each ``key = value`` whose key is a credential's loses its value; any other pair is passed over without
    consuming its value (``failed: password=x`` still finds ``password``)."""
    parts: list[str] = []
    pos = 0
    while (match := _ASSIGNMENT.search(text, pos)) is not None:
        if not _is_secret_key(match["key"]):
            parts.append(text[pos : match.end("sep")])
            pos = match.end("sep")
            continue
        value = match["value"]
        quote = value[: len(value) - len(value.lstrip("\\\"'"))]
        parts.append(text[pos : match.start("value")] + (f"{quote}{REDACTED}{quote}" if quote else REDACTED))
        pos = match.end()
    parts.append(text[pos:])
    return "".join(parts)


def _redact_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "=" in text or ":" in text:
        text = _redact_assignments(text)
    text = _SECRET_TEXT.sub(REDACTED, text)
    if text[:1] in ("{", "[") or text[-1:] in ("}", "]"):
        text = _redact_json_text(text, secrets)
    return text


def _redact_json_text(text: str, secrets: tuple[str, ...]) -> str:
    """A string that holds a JSON object or array is redacted as that JSON (a credential's key hides its whole value,
    nested objects included); one that does not parse, or needs nothing more, is returned as it is."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if not isinstance(parsed, (dict, list)):
        return text
    cleaned = _redact(parsed, secrets, 1)
    return text if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def _redacted_key(key: str, secrets: tuple[str, ...]) -> str:
    """A dict's key as it may be stored: a credential used as a key (a registered secret, an ``sk-`` key) goes
    like one in a value (keys repeat across calls: cached)."""
    return _redact_text(key, secrets) if key else key


def operation_id_problem(operation_id: str, *, secrets: Iterable[str] = ()) -> str | None:
    """Why a write's ``operation_id`` may not be recorded, or ``None``: it holds a credential (one of ``secrets``,
    or one :func:`redact` recognises). An operation id is a business key the ledger and the receiver match on, so
    it is refused rather than redacted: two ids redacted alike would merge two operations.

    >>> operation_id_problem("refund-42") is None
    True
    >>> operation_id_problem("charge-hunter2-1", secrets=["hunter2"])[:35]
    'the operation id holds a credential'
    """
    known = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
    if _redact_text(operation_id, known) == operation_id:
        return None
    return (
        "the operation id holds a credential (a registered secret, or a key by its shape): derive it from a business "
        "key that is not secret"
    )


def redact(value: Any, *, secrets: Iterable[str] = ()) -> Any:
    """Return a copy of ``value`` fit to be stored: credentials replaced by ``"[redacted]"``.

    Removed: values under credential-like keys (api_key, authorization, password, token, secret, cookie, ...),
    bearer/basic credentials, ``sk-`` keys and ``password=...``-style assignments inside strings, passwords in
    URLs, and every value the application registers in ``secrets`` wherever it appears. Hashing is not
    anonymizing, so nothing is kept as a hash.

    >>> redact({"q": "x", "api_key": "k", "note": "Bearer abc.def.ghi"})
    {'q': 'x', 'api_key': '[redacted]', 'note': '[redacted]'}
    """
    known = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
    return _redact(value, known, 0)


def _redact(value: Any, secrets: tuple[str, ...], depth: int) -> Any:
    kind = type(value)
    if kind is str:
        return _redact_text(value, secrets)
    if value is None or kind is bool or kind is int:
        return value
    if kind is float:
        return value if value == value and value not in _INFINITIES else repr(value)
    if depth > _MAX_DEPTH:
        return REDACTED
    if kind is dict or isinstance(value, Mapping):
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            name = _redacted_key(key if isinstance(key, str) else str(key), secrets)
            while name in cleaned:  # two keys redacted alike: neither value is lost
                name += "'"
            cleaned[name] = (
                REDACTED if isinstance(key, str) and _is_secret_key(key) else _redact(item, secrets, depth + 1)
            )
        return cleaned
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_redact(item, secrets, depth + 1) for item in value]
    if isinstance(value, str):
        return _redact_text(str(value), secrets)
    if isinstance(value, (bool, int, float)):
        return _redact(float(value) if isinstance(value, float) else int(value), secrets, depth)
    return _redact_text(repr(value), secrets)
