"""Call identity: canonical JSON (RFC 8785), the call fingerprint, and redaction of secrets.

Two calls are the same action when their canonical JSON is the same: key order never matters, ``5`` and ``5.0``
are one number, and every argument stays in the fingerprint (an amount or a customer id is never "noise").
Values that JSON cannot carry (NaN, Infinity, bytes, sets, arbitrary objects, non-string keys, integers beyond
IEEE-754's exact range) are refused with :class:`CanonicalError` instead of being coerced.

The fast path validates the value in one walk and lets the C JSON encoder write it; that output *is* RFC 8785
whenever every float prints the same in Python and ECMAScript and no key needs UTF-16 ordering. The rare values
where they differ (integral floats such as ``5.0``, floats below ``1e-4``, keys outside the BMP) go through the
``rfc8785`` reference implementation, so the result is always the RFC's.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import rfc8785

__all__ = [
    "REDACTED",
    "CanonicalError",
    "canonical_json",
    "fingerprint",
    "redact",
]

REDACTED = "[redacted]"

_MAX_SAFE_INT = 2**53 - 1
_encode_ascii = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=True
).encode
_encode_unicode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=True
).encode


class CanonicalError(ValueError):
    """The value cannot be written as canonical JSON (RFC 8785); the message says which part and why."""


class _NeedsReference(Exception):
    """Internal: the value is valid JSON but the fast path would not print it as RFC 8785 does."""


class _Invalid(Exception):
    """Internal: the value is not JSON data; :func:`_explain` says why."""


_INFINITIES = (float("inf"), float("-inf"))
_MAX_DEPTH = 200


def _check(value: Any, depth: int) -> None:
    """Validate ``value`` as JSON data; raise :class:`_NeedsReference` where the fast path would differ.

    On the hot path this builds no strings; an invalid value is walked again by :func:`_explain` for the message.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return
    if kind is int:
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            return
        raise _Invalid
    if kind is float:
        if value != value or value in _INFINITIES:
            raise _Invalid
        if value.is_integer() or -1e-4 < value < 1e-4:
            raise _NeedsReference
        return
    if depth > _MAX_DEPTH:
        raise _Invalid
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _Invalid
            if not key.isascii() and max(key) > "\uffff":
                raise _NeedsReference
            _check(item, depth + 1)
        return
    if kind is list or kind is tuple:
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, Mapping):
        raise _NeedsReference  # dict subclasses and other mappings: the reference writes their plain copy
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        raise _NeedsReference  # subclasses (enums...): the reference writes the plain value
    raise _Invalid


def _explain(value: Any, path: str = "$", depth: int = 0) -> str | None:
    """Why ``value`` is not JSON data, naming the offending part (the slow twin of :func:`_check`)."""
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
            if type(key) is not str:
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


def _plain(value: Any) -> Any:
    """Copy ``value`` into plain JSON types for the reference serializer (subclasses become their base type)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        if not -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            raise CanonicalError(f"integer {value} is outside the range JSON numbers hold exactly; pass it as a string")
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    raise CanonicalError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` as RFC 8785 canonical JSON (UTF-8 bytes).

    >>> canonical_json({"b": 1, "a": [5.0, "x"]})
    b'{"a":[5,"x"],"b":1}'
    >>> canonical_json({"amount": float("nan")})
    Traceback (most recent call last):
    ...
    agents_loopguard.canonical.CanonicalError: $.amount: nan is not a JSON number (NaN and Infinity are refused)
    """
    try:
        _check(value, 0)
    except _Invalid:
        raise CanonicalError(_explain(value) or "value is not JSON data") from None
    except _NeedsReference:
        problem = _explain(value)
        if problem is not None:
            raise CanonicalError(problem) from None
        try:
            return rfc8785.dumps(_plain(value))
        except CanonicalError:
            raise
        except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError) as exc:
            raise CanonicalError(str(exc)) from exc
    except RecursionError as exc:
        raise CanonicalError("value is nested too deeply or contains itself") from exc
    try:
        text = _encode_ascii(value)  # the faster encoder; equal to RFC 8785 when every string is ASCII
        if "\\u" in text:  # some string needed an escape: write non-ASCII as raw UTF-8, as the RFC says
            text = _encode_unicode(value)
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalError("a string contains a lone surrogate, which is not valid Unicode") from exc
    except ValueError as exc:  # circular reference
        raise CanonicalError(str(exc)) from exc


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
    "secret",
    "apikey",
    "accesstoken",
    "refreshtoken",
    "authtoken",
    "sessiontoken",
    "idtoken",
    "privatekey",
    "credentials",
    "cookie",
    "signature",
)
_SECRET_TEXT = re.compile(
    r"(?i:\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,})"  # Authorization header values
    r"|\bsk-[A-Za-z0-9_-]{12,}"  # API keys in the sk- format
    r"|(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"  # user:password@ in URLs
)
_SECRET_ASSIGNMENT = re.compile(r"(?i)(password|passwd|pwd|api_?key|token|secret)=[\"']?[^\s,;&'\"]+")
"""``password=...`` in free text (error messages, connection strings, query strings): the value goes, the key stays."""


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    norm = "".join(ch for ch in key.lower() if ch.isalnum())
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def _redact_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "=" in text:
        text = _SECRET_ASSIGNMENT.sub(rf"\1={REDACTED}", text)
    return _SECRET_TEXT.sub(REDACTED, text)


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
        return {
            str(key): REDACTED if isinstance(key, str) and _is_secret_key(key) else _redact(item, secrets, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_redact(item, secrets, depth + 1) for item in value]
    if isinstance(value, str):
        return _redact_text(str(value), secrets)
    if isinstance(value, (bool, int, float)):
        return _redact(float(value) if isinstance(value, float) else int(value), secrets, depth)
    return _redact_text(repr(value), secrets)
