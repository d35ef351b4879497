"""A corpus for measuring redaction: texts that hold a credential (each with the secret that must go) and ordinary
texts that hold none (which must come back unchanged). Used by tests/test_redaction.py and
benchmarks/bench_redaction.py, which compares our patterns with detect-secrets' plugins on it.

The credentials are fake: shaped like the real formats (lengths and prefixes from the providers' documentation, as
detect-secrets and gitleaks encode them), never issued by anyone.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["NEGATIVES", "POSITIVES", "Positive"]


class Positive(NamedTuple):
    text: str
    secret: str
    """The part that must not survive redaction."""


AKIA = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GH_PAT = "github_pat_" + "11ABCDEFG0" + "x" * 12 + "_" + "Yz9" * 19 + "Q"
SK_LIVE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
RK_LIVE = "rk_live_" + "51H8sdfKJHkjhsdf98sdfKJH"
SK_OPENAI = "sk-proj-" + "abcDEF123456ghiJKL789012mnoPQR"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GLPAT = "glpat-" + "aB3dE5gH7jK9mN1pQ3sT"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
GOOGLE = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
NPM = "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq98\n-----END RSA PRIVATE KEY-----"

POSITIVES: list[Positive] = [
    # key = value in free text, every separator and quoting the issue found
    Positive('PASSWORD="hunter 2"', "hunter 2"),
    Positive("PASSWORD='hunter 2' next", "hunter 2"),
    Positive("password: hunter2", "hunter2"),
    Positive("pwd = hunter2", "hunter2"),
    Positive("passphrase=correct-horse-battery", "correct-horse-battery"),
    Positive("api-key=k3y-0987654321", "k3y-0987654321"),
    Positive("x-api-key: k3y-1234567890", "k3y-1234567890"),
    Positive("X-Api-Key:k3y-1234567890", "k3y-1234567890"),
    Positive(f"aws_secret_access_key={AWS_SECRET}", AWS_SECRET),
    Positive(f"AWS_SECRET_ACCESS_KEY = {AWS_SECRET}", AWS_SECRET),
    Positive("DB_PASSWORD=s3cret!pass", "s3cret!pass"),
    Positive("mysql_pwd: s3cret!pass", "s3cret!pass"),
    Positive("client_secret=abc123xyz789", "abc123xyz789"),
    Positive('login failed: password="hunter2" host=db', "hunter2"),
    Positive("GET /v1?api_key=zz9911&page=2", "zz9911"),
    Positive("access_token=tok-0099887766&page=2", "tok-0099887766"),
    Positive("secret := 'swordfish'", "swordfish"),
    Positive("export GITHUB_TOKEN=tok_abcdef123456", "tok_abcdef123456"),
    Positive("auth_token => 'abcdef123456'", "abcdef123456"),
    # credentials in headers
    Positive("Authorization: Token 9944b09199c62bcf9418ad846dd0e4bb", "9944b09199c62bcf9418ad846dd0e4bb"),
    Positive("Authorization: Bearer abc.def.ghi123", "abc.def.ghi123"),
    Positive("authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    Positive("Proxy-Authorization: Digest username=admin", "username=admin"),
    Positive("curl -H 'Bearer abcdef1234567'", "abcdef1234567"),
    # JSON held inside a string
    Positive('{"user": "ana", "password": "hunter 2"}', "hunter 2"),
    Positive('{"api_key":"k3y-55aa66bb"}', "k3y-55aa66bb"),
    Positive('{"credentials": {"user": "ana", "pin": "8812"}}', "8812"),
    Positive('[{"token": 12345678}]', "12345678"),
    Positive('{"note": "{\\"password\\": \\"hunter2\\"}"}', "hunter2"),
    Positive('payload {\\"password\\": \\"hunter2\\"} sent', "hunter2"),
    # keyless formats (detect-secrets plugins, gitleaks rules)
    Positive(f"deploy with {AKIA} today", AKIA),
    Positive(f"ASIA{AKIA[4:]}", f"ASIA{AKIA[4:]}"),
    Positive(f"push with {GHP}", GHP),
    Positive(f"token {GH_PAT} expires", GH_PAT),
    Positive(f"charge with {SK_LIVE}", SK_LIVE),
    Positive(f"restricted {RK_LIVE}", RK_LIVE),
    Positive(f"call with {SK_OPENAI} now", SK_OPENAI),
    Positive(f"slack {SLACK}", SLACK),
    Positive(f"gitlab {GLPAT}", GLPAT),
    Positive(f"session {JWT}", JWT),
    Positive(f"maps key {GOOGLE}", GOOGLE),
    Positive(f"publish {NPM}", NPM),
    Positive(f"key:\n{PEM}\n", "MIIEpAIBAAKCAQEA7bq98"),
    Positive("https://bob:pa55w0rd@example.test/x", "pa55w0rd"),
    Positive("postgresql://app:s3cr3tpw@db.internal:5432/prod", "s3cr3tpw"),
]

NEGATIVES: list[str] = [
    "What is our refund policy?",
    "doc-14 Refunds within 30 days",
    "Your password must be at least 12 characters long.",
    "Reset your password from the account page.",
    "passwords=3 tokens=4 and a token",
    "max_tokens=512 temperature=0.2",
    "input_tokens: 1200, output_tokens: 300",
    "token_count: 5",
    "The bearer of this note is a friend.",
    "Basic plan: 10 seats",
    "Token limits apply per request.",
    "the secret to good bread is time",
    "The API key page lists your keys.",
    "order_id=42 amount=120.50 currency=EUR",
    "SELECT * FROM orders WHERE id = 42",
    "https://example.test/search?q=refund&page=2",
    "next_page_token=cursor-7",
    "Contact ana@example.test about invoice INV-2024-0042.",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "commit 7c15fd2 fixed the flake",
    "task refund-question stopped same_call",
    "search_docs: the same call already ran 2 times at revision 1 (allowed: 2)",
    "Shipped 3 parcels; tracking AB123456789CD",
    "AKIA is the prefix of AWS access key ids",
    "sk_live keys belong in a vault",
    "ghp tokens expire",
    '{"query": "refund policy", "limit": 5}',
    '{"order": 42, "status": "confirmed"}',
    "[1, 2, 3]",
    "{not json: at all",
    "Note: the customer asked twice.",
    "keyboard: US layout",
    "monkey=banana",
    "bypass=1 compass: north",
    "pwdx is a tool name",
    "The word passphrase means a long password.",
    "PyPI, npm and crates.io are registries.",
    "eyJ is how base64 JSON starts",
    "Version 2.0.1-beta+exp.sha.5114f85",
]
