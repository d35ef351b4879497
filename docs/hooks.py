"""MkDocs hook: the site's home page is the README and its changelog page is CHANGELOG.md, so each text has one
source. Their links into docs/ are rewritten for the site (``docs/sdk.md`` -> ``sdk.md``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}
_LINK = re.compile(r"\]\((?:\./)?(docs/|CHANGELOG\.md|README\.md)")


def _site_link(match: re.Match[str]) -> str:
    target = match.group(1)
    return "](" + {"docs/": "", "CHANGELOG.md": "changelog.md", "README.md": "index.md"}[target]


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    source = SOURCES.get(page.file.src_uri)
    if source is None:
        return markdown
    return _LINK.sub(_site_link, (ROOT / source).read_text(encoding="utf-8"))
