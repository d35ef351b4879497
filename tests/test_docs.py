"""Every code block of the README and of docs/ runs here, as a reader would paste it.

One test per page: the page's blocks run in order in one namespace (a guide builds on its earlier blocks), against
the test's own default store (the root conftest.py points ``$LOOPGUARD_DATABASE_URL`` at a fresh SQLite file).
Sybil finds the fenced blocks; what a block means is said by the fence's language and, where needed, by an HTML
comment right before the fence (invisible on GitHub, on PyPI and in the docs site, which renders a fence with extra
words in its info string as plain text):

- ```` ```python ````: executed; ``__name__`` is ``"__main__"``, so a complete program runs as pasted.
- ``<!-- fragment -->`` then ```` ```python ````: part of a program (it names things it does not define, or uses
  top-level ``await``): compiled only.
- ``<!-- output -->`` then ```` ```text ````: what the previous Python block printed (``...`` matches anything,
  whitespace runs compare equal).
- ```` ```console ````: every ``$ loopguard ...`` line runs (in process) against the page's store and must exit 0;
  any other command in a console block is an error (put commands that are not run in a ```` ```sh ```` block).
- any other language (``sh``, ``json``, ``diff``, ``text`` without the marker...) is shown, not run.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example, Region
from sybil.evaluators.python import pad
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from agents_loopguard import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_LIMIT = 16_000
"""Bytes: the README is a newcomer's page; what is longer goes to docs/."""

_MARKER = re.compile(r"<!--\s*([a-z-]+)\s*-->[ \t]*\n[ \t]*\Z")
_MARKERS = {"python": {None, "fragment"}, "text": {None, "output"}}
_OUTPUT = "__printed__"


def _marker(document: Document, start: int) -> str | None:
    found = _MARKER.search(document.text, 0, start)
    return found.group(1) if found else None


def run_python(example: Example) -> None:
    """Execute the block in the page's namespace; what it prints is kept for an ``output`` block."""
    code = compile(pad(example.parsed, example.line + example.parsed.line_offset), example.path, "exec")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, example.namespace)
    example.namespace.pop("__builtins__", None)
    example.namespace[_OUTPUT] = printed.getvalue()


def compile_fragment(example: Example) -> None:
    """A fragment is compiled, not run: it must at least be valid Python (top-level ``await`` allowed)."""
    source = pad(example.parsed, example.line + example.parsed.line_offset)
    compile(source, example.path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def check_output(example: Example) -> str | None:
    """The text block shows what the previous Python block printed."""
    if _OUTPUT not in example.namespace:
        return "an output block must follow a Python block that ran"
    printed = example.namespace.pop(_OUTPUT)
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    if checker.check_output(str(example.parsed), printed, flags):
        return None
    return f"the page shows:\n{example.parsed}\nthe block printed:\n{printed}"


def _commands(source: str) -> Iterator[str]:
    """The ``$ `` lines of a console block, with ``\\`` continuations joined."""
    pending = ""
    for line in source.splitlines():
        if pending:
            pending += " " + line.strip()
        elif line.startswith("$ "):
            pending = line[2:].strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        yield pending
        pending = ""


def run_console(example: Example) -> str | None:
    """Run each ``loopguard`` command of the block in process, on the page's store; each must exit 0."""
    for command in _commands(str(example.parsed)):
        argv = shlex.split(command)
        if argv[0] != "loopguard":
            return f"a console block runs loopguard commands only (use a sh block for {command!r})"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ended:
            cli.main(argv[1:])
        if ended.value.code != 0:
            return f"{command!r} exited {ended.value.code}: {err.getvalue() or out.getvalue()}"
    return None


_EVALUATORS: dict[tuple[str, str | None], Any] = {
    ("python", None): run_python,
    ("python", "fragment"): compile_fragment,
    ("text", "output"): check_output,
    ("console", None): run_console,
}


def blocks(document: Document) -> Iterator[Region]:
    """Sybil parser: every fenced block whose language and marker say it runs, with its evaluator."""
    lexer = FencedCodeBlockLexer(language=r"[^\n]*", mapping={"language": "language", "source": "source"})
    for region in lexer(document):
        language = str(region.lexemes["language"]).strip()
        marker = _marker(document, region.start)
        if marker is not None and marker not in _MARKERS.get(language, set()):
            raise ValueError(
                f"{document.path}, {document.line_column(region.start)}: marker {marker!r} does not apply to a "
                f"{language or 'plain'} block"
            )
        evaluator = _EVALUATORS.get((language, marker))
        if evaluator is None:
            continue
        region.parsed = region.lexemes["source"]
        region.evaluator = evaluator
        yield region


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_block_of_the_page_runs(page: Path) -> None:
    """Each page's blocks, in order, in one namespace: the executed ones run, fragments compile, outputs match."""
    document = Document.parse(str(page), blocks)
    document.namespace["__name__"] = "__main__"
    for example in document.examples():
        example.evaluate()


def test_the_readme_is_a_short_page() -> None:
    """A newcomer's page: at most 16 KB, with the two quick-start lines CI runs (.ci/run's readme_line)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= README_LIMIT, "move the details to docs/"
    for marker in ("# the demo", "# the tests"):
        assert any(line.rstrip().endswith(marker) for line in text.splitlines()), marker


def test_every_install_line_installs_from_the_repository_with_extras_that_exist() -> None:
    """Issue 28: docs/server.md said ``pip install 'agents-loopguard[server]'``, a package no index publishes. Every
    ``pip install`` of a page installs the clone (``.``) or a wheel built from it, with extras pyproject.toml has."""
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    installs = [
        (page.name, match.group(1))
        for page in PAGES
        for match in re.finditer(r"pip install ((?:-[-\w]+ )*'?[^\s'`]+'?)", page.read_text(encoding="utf-8"))
        if not match.string.startswith("` finds nothing", match.end())  # the README saying it is not published
    ]
    assert any(name == "server.md" for name, _ in installs), "docs/server.md says how to install the server"
    for name, command in installs:
        target = command.split()[-1].strip("'")
        assert target.startswith((".", "dist/")), f"{name}: pip install {command} (the package is not published)"
        named = re.search(r"\[([\w,]+)\]", target)
        unknown = set(named.group(1).split(",")) - extras if named else set()
        assert not unknown, f"{name}: pip install {command} names extras pyproject.toml lacks: {unknown}"


def test_a_marker_that_does_not_fit_its_block_is_refused(tmp_path: Path) -> None:
    """A typo'd or misplaced marker fails loudly instead of silently running (or skipping) a block."""
    page = tmp_path / "page.md"
    page.write_text("<!-- fragmnet -->\n```python\nprint(1)\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="marker 'fragmnet' does not apply to a python block"):
        Document.parse(str(page), blocks)


def test_an_output_block_that_differs_fails(tmp_path: Path) -> None:
    """The output check can fail: a page that shows other text than its block printed is caught."""
    page = tmp_path / "page.md"
    page.write_text("```python\nprint('stopped')\n```\n\n<!-- output -->\n```text\ncompleted\n```\n", encoding="utf-8")
    document = Document.parse(str(page), blocks)
    examples = list(document.examples())
    examples[0].evaluate()
    with pytest.raises(Exception, match="the block printed:\nstopped"):
        examples[1].evaluate()


def test_a_console_command_that_fails_fails_the_page(tmp_path: Path) -> None:
    """A documented command that exits non-zero (here: an unknown task) fails the page."""
    page = tmp_path / "page.md"
    page.write_text("```console\n$ loopguard show no-such-task\n```\n", encoding="utf-8")
    (example,) = Document.parse(str(page), blocks).examples()
    with pytest.raises(Exception, match="exited 2"):
        example.evaluate()
