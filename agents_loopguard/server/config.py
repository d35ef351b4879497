"""What ``loopguard serve`` is configured with: the store, the address, and the bearer tokens with their scopes.

Tokens come from the environment, never from a command-line argument (which other users of the machine can read in
the process list). ``LOOPGUARD_SERVER_TOKENS`` holds entries separated by whitespace, newlines or ``;``, each
``name:scope:secret`` with an optional ``:flow,flow`` for a workflow token; ``LOOPGUARD_SERVER_TOKENS_FILE`` names a
file with the same entries (``#`` starts a comment). Scopes:

* ``operator``: everything (the API and the console); decisions and stops record the token's ``name``;
* ``workflow``: trigger activations of the flows it lists (required: ``name:workflow:secret:flow-a,flow-b``), and
  reading those activations' tasks (task id ``<flow>:<event id>``). No console, no decisions.

>>> tokens = Tokens.parse("ana:operator:correct-horse-battery-staple-1 n8n:workflow:zR7-4fTq-Lw9x-Pp2a-Ee5m:orders")
>>> tokens.authenticate("correct-horse-battery-staple-1")
Principal(name='ana', scope='operator', flows=frozenset())
>>> tokens.authenticate("wrong") is None
True
>>> tokens.authenticate("zR7-4fTq-Lw9x-Pp2a-Ee5m").may_use_flow("orders")
True
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..values.errors import InputError
from ..values.probes import Probe

__all__ = [
    "MIN_SECRET_LENGTH",
    "OPERATOR",
    "TOKENS_ENV",
    "TOKENS_FILE_ENV",
    "WORKFLOW",
    "ConfigError",
    "Principal",
    "ServerConfig",
    "Tokens",
    "is_loopback",
]

TOKENS_ENV = "LOOPGUARD_SERVER_TOKENS"
"""Environment variable with the token entries (``name:scope:secret[:flows]``)."""
TOKENS_FILE_ENV = "LOOPGUARD_SERVER_TOKENS_FILE"
"""Environment variable naming a file of token entries, one per line."""
OPERATOR: Literal["operator"] = "operator"
WORKFLOW: Literal["workflow"] = "workflow"
METRICS: Literal["metrics"] = "metrics"
Scope = Literal["operator", "workflow", "metrics"]
MIN_SECRET_LENGTH = 20
"""Shorter secrets are refused: a token is a password that never expires, guessable ones are no protection."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_FLOW = re.compile(r"^[^\s,:;/]{1,200}$")


class ConfigError(InputError):
    """The server's configuration cannot be used (the message says which entry and why, never a secret)."""


@dataclass(frozen=True)
class Principal:
    """Who called: a token's name and scope (never its secret)."""

    name: str
    scope: Scope
    flows: frozenset[str] = frozenset()
    """For a workflow token: the flows it may activate and read (an operator may use every flow)."""

    @property
    def operator(self) -> bool:
        """True for an operator token (everything is allowed)."""
        return self.scope == OPERATOR

    def may_use_flow(self, flow: str) -> bool:
        """May this caller start and read activations of ``flow``?"""
        return self.operator or flow in self.flows


@dataclass(frozen=True)
class _Entry:
    principal: Principal
    digest: bytes = field(repr=False)
    """sha256 of the secret: comparisons are of equal length, and the secret itself is not kept."""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _parse_entry(text: str, number: int) -> tuple[_Entry, str]:
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise ConfigError(f"token entry {number}: expected name:scope:secret[:flows], got {len(parts)} field(s)")
    name, scope, secret = parts[0], parts[1], parts[2]
    if not _NAME.match(name):
        raise ConfigError(f"token entry {number}: name {name[:64]!r} must be letters, digits, '.', '_', '@' or '-'")
    if scope not in (OPERATOR, WORKFLOW, METRICS):
        raise ConfigError(f"token entry {number} ({name}): scope must be 'operator', 'workflow' or 'metrics'")
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(
            f"token entry {number} ({name}): the secret is shorter than {MIN_SECRET_LENGTH} characters; "
            'make one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'
        )
    flows: frozenset[str] = frozenset()
    if scope == WORKFLOW:
        listed = [f for f in parts[3].split(",") if f] if len(parts) == 4 else []
        if not listed or not all(_FLOW.match(f) for f in listed):
            raise ConfigError(
                f"token entry {number} ({name}): a workflow token lists the flows it may use, comma-separated "
                "(name:workflow:secret:flow-a,flow-b)"
            )
        flows = frozenset(listed)
    elif len(parts) == 4:
        raise ConfigError(f"token entry {number} ({name}): only a workflow token is limited to flows")
    return _Entry(Principal(name, scope, flows), _digest(secret)), secret


class Tokens:
    """The accepted bearer tokens. A presented token is compared with every secret in constant time."""

    def __init__(self, entries: Iterable[_Entry] = ()) -> None:
        self._entries = tuple(entries)

    @classmethod
    def parse(cls, text: str) -> Tokens:
        """Parse entries separated by whitespace, newlines or ``;`` (``#`` to the end of a line is a comment)."""
        lines = [line.split("#", 1)[0] for line in text.splitlines()]
        items = [item for line in lines for item in re.split(r"[\s;]+", line) if item]
        entries: list[_Entry] = []
        names: set[str] = set()
        secrets: set[str] = set()
        for number, item in enumerate(items, 1):
            entry, secret = _parse_entry(item, number)
            if entry.principal.name in names:
                raise ConfigError(f"token entry {number}: the name {entry.principal.name!r} is used twice")
            if secret in secrets:
                raise ConfigError(f"token entry {number} ({entry.principal.name}): the same secret is used twice")
            names.add(entry.principal.name)
            secrets.add(secret)
            entries.append(entry)
        return cls(entries)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tokens:
        """The tokens of ``LOOPGUARD_SERVER_TOKENS`` and the file named by ``LOOPGUARD_SERVER_TOKENS_FILE``."""
        env = os.environ if environ is None else environ
        text = env.get(TOKENS_ENV, "")
        path = env.get(TOKENS_FILE_ENV)
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    text += "\n" + handle.read()
            except OSError as exc:
                raise ConfigError(f"{TOKENS_FILE_ENV}={path!r} cannot be read: {exc.strerror or exc}") from exc
        return cls.parse(text)

    def with_operator(self, name: str, secret: str) -> Tokens:
        """These tokens plus an operator token (for one made at start-up)."""
        entry, _ = _parse_entry(f"{name}:{OPERATOR}:{secret}", len(self._entries) + 1)
        return Tokens((*self._entries, entry))

    def authenticate(self, presented: str | None) -> Principal | None:
        """The principal whose secret is ``presented``, or None; every secret is compared, in constant time."""
        if not presented:
            return None
        digest = _digest(presented)
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry.principal
        return found

    def names(self) -> list[str]:
        """The token names with their scopes (for start-up messages: never the secrets)."""
        return [f"{e.principal.name} ({e.principal.scope})" for e in self._entries]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Tokens({', '.join(self.names())})"


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (``localhost``, 127.0.0.0/8, ``::1``).

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0"), is_loopback("example.org")
    (True, True, False, False)
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    """Everything the app needs besides the store."""

    tokens: Tokens = field(default_factory=Tokens)
    secure_cookies: bool = False
    """Send the session cookie only over HTTPS (set it when the console is served behind TLS)."""
    session_ttl: float = 8 * 3600.0
    """Seconds a console login lasts."""
    title: str = "loopguard"
    probes: Mapping[str, Probe] = field(default_factory=dict)
    """The writes' probes by tool name (:func:`~agents_loopguard.ops.probes.load_probes`): an operator may ask the
    receiver about an unknown operation of these tools (``POST /api/v1/operations/{op}/probe``, the console)."""
