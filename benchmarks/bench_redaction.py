"""Redaction measured on a corpus (tests/support/secrets_corpus.py): ours against detect-secrets' plugins.

Run::

    .venv/bin/python benchmarks/bench_redaction.py

For each detector: positives whose secret is gone after redaction, negatives (ordinary text) left unchanged, and
the time per text, as a ratio to ours measured in interleaved rounds. detect-secrets (Yelp) is not a dependency: it
is measured only when installed (``pip install detect-secrets``), with its default plugins, by replacing each
secret it reports on a line with ``[redacted]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents_loopguard.values.canonical import REDACTED, redact  # noqa: E402
from tests.support.secrets_corpus import NEGATIVES, POSITIVES  # noqa: E402

Detector = Callable[[str], str]


def ours(text: str) -> str:
    return str(redact(text))


ENTROPY_PLUGINS = ("Base64HighEntropyString", "HexHighEntropyString")


def detect_secrets_detector(*, entropy: bool) -> Detector | None:
    """detect-secrets' default plugins (without its two high-entropy plugins unless ``entropy``) as a redactor, or
    None when it is not installed."""
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings, get_settings
    except ImportError:
        return None

    def redactor(text: str) -> str:
        lines = []
        with default_settings():
            if not entropy:
                get_settings().disable_plugins(*ENTROPY_PLUGINS)
            for line in text.split("\n"):
                found = sorted({s.secret_value or "" for s in scan_line(line)} - {""}, key=len, reverse=True)
                for value in found:
                    line = line.replace(value, REDACTED)
                lines.append(line)
        return "\n".join(lines)

    return redactor


def score(detector: Detector) -> tuple[int, int, list[str], list[str]]:
    """(positives caught, negatives kept, the positives missed, the negatives changed)."""
    missed = [p.text for p in POSITIVES if p.secret in detector(p.text)]
    changed = [n for n in NEGATIVES if detector(n) != n]
    return len(POSITIVES) - len(missed), len(NEGATIVES) - len(changed), missed, changed


def per_text_seconds(detector: Detector) -> float:
    texts = [p.text for p in POSITIVES] + NEGATIVES
    start = time.perf_counter()
    for text in texts:
        detector(text)
    return (time.perf_counter() - start) / len(texts)


def main() -> None:
    detectors: dict[str, Detector] = {"agents_loopguard": ours}
    for entropy, name in ((True, "detect-secrets, default plugins"), (False, "detect-secrets, without entropy")):
        other = detect_secrets_detector(entropy=entropy)
        if other is not None:
            detectors[name] = other
    print(f"corpus: {len(POSITIVES)} positives, {len(NEGATIVES)} negatives")
    timings: dict[str, list[float]] = {name: [] for name in detectors}
    for _ in range(5):  # interleaved rounds
        for name, detector in detectors.items():
            timings[name].append(per_text_seconds(detector))
    base = statistics.median(timings["agents_loopguard"])
    for name, detector in detectors.items():
        caught, kept, missed, changed = score(detector)
        ratio = statistics.median(timings[name]) / base
        print(
            f"{name}: positives redacted {caught}/{len(POSITIVES)}, negatives unchanged {kept}/{len(NEGATIVES)}, "
            f"time per text {statistics.median(timings[name]) * 1e6:.0f} us (x{ratio:.1f} ours)"
        )
        for text in missed:
            print(f"  missed: {text!r}")
        for text in changed:
            print(f"  changed: {text!r} -> {detector(text)!r}")


if __name__ == "__main__":
    main()
