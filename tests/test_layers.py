"""The house shows its layers, and every import points down (read from the syntax tree of the package).

values -> store -> engine (the guard) -> guarded run -> operations -> adapters -> server and command line.
The engine and the guarded run import no framework; adapters only translate (they build no ``Guard``, ``Verdict``
or ``Outcome`` and never end a task themselves); the package never imports ``tests/``.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

import agents_loopguard
from agents_loopguard.function_calling import LoopOptions
from agents_loopguard.function_calling.options import LoopFields
from agents_loopguard.run.options import RunFields, RunOptions

PACKAGE = Path(agents_loopguard.__file__).parent
FRAMEWORKS = ("agents", "openai", "langchain", "langgraph", "google", "dbos", "temporalio", "restate")
ADAPTERS = ("sdk", "function_calling", "langchain", "adk", "durable")
ENTRY_POINTS = {
    "sdk/run.py": ("run_guarded", "run_guarded_streamed"),
    "sdk/resume.py": ("resume_guarded",),
    "sdk/tools.py": ("guarded_tool", "guard_tool"),
    "sdk/attach.py": ("LoopGuard.__init__",),
    "sdk/testing.py": ("call_tool", "call_tool_sync"),
    "adk/run.py": ("run_guarded",),
    "adk/plugin.py": ("LoopGuardPlugin.__init__",),
    "adk/tools.py": ("guarded_tool",),
    "function_calling/entry.py": ("run_chat_completions", "arun_chat_completions", "run_responses", "arun_responses"),
    "langchain/middleware.py": ("LoopGuardMiddleware.__init__",),
}


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations/versions" in path.as_posix():
            continue
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def module_name(relative: str) -> str:
    parts = ["agents_loopguard", *relative.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(relative: str, tree: ast.Module) -> set[str]:
    """The absolute modules ``relative`` imports (relative imports resolved), at module level or inside code."""
    package = module_name(relative).split(".")
    if not relative.endswith("__init__.py"):
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                found.add(node.module)
    return found


def test_at_most_eight_modules_sit_directly_under_the_package() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(flat) <= 8, flat
    assert not (PACKAGE / "openai_loop.py").exists(), "no alias module"


def test_the_root_package_exports_at_most_25_names() -> None:
    assert len(agents_loopguard.__all__) <= 25
    assert all(hasattr(agents_loopguard, name) for name in agents_loopguard.__all__)


def test_no_module_is_over_700_lines() -> None:
    long = {rel: n for rel, _ in modules() if (n := len((PACKAGE / rel).read_text().splitlines())) > 700}
    assert long == {}


FLOORS = {
    "values": 0,
    "store": 1,
    "migrations": 1,
    "engine": 2,
    "run": 3,
    "ops": 4,
    **dict.fromkeys(ADAPTERS, 5),
    **dict.fromkeys(("server", "cli", "views", "demo", "__main__", ""), 6),
}
"""Each floor of the house, by the package's first-level name ("" is the root package, which re-exports)."""


def floor(module: str) -> int:
    """The floor of ``agents_loopguard.<first>...``; a name not listed fails (every new folder takes a floor).

    >>> floor("agents_loopguard.values.canonical"), floor("agents_loopguard.engine.core"), floor("agents_loopguard")
    (0, 2, 6)
    """
    first = module.split(".")[1] if "." in module else ""
    assert first in FLOORS, f"{module}: give agents_loopguard/{first} a floor in tests/test_layers.py"
    return FLOORS[first]


def _imported_modules(relative: str, tree: ast.Module) -> set[str]:
    """What ``relative`` imports from the package; ``from .. import run`` is read as ``agents_loopguard.run``."""
    found = {m for m in imports(relative, tree) if m.startswith("agents_loopguard")}
    package = module_name(relative).split(".")[: None if relative.endswith("__init__.py") else -1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and not node.module:
            base = ".".join(package[: len(package) - node.level + 1])
            folder = PACKAGE.parent / base.replace(".", "/")
            for alias in node.names:
                if (folder / alias.name).is_dir() or (folder / f"{alias.name}.py").is_file():
                    found.discard(base)
                    found.add(f"{base}.{alias.name}")
    return found


def test_every_import_points_down_a_floor_or_stays_on_its_own() -> None:
    """values -> store -> engine -> run -> ops -> adapters -> server/CLI: no module imports a floor above its own,
    at module level or inside a function (issue 31: the engine's values and its guard were one folder, so 15
    imports ran from the store back up into ``engine/``)."""
    upward = [
        f"{relative} -> {imported}"
        for relative, tree in modules()
        for imported in _imported_modules(relative, tree)
        if floor(imported) > floor(module_name(relative))
    ]
    assert upward == []


def test_the_engine_and_the_guarded_run_import_no_framework_and_nothing_above_them() -> None:
    for relative, tree in modules():
        if not relative.startswith(("values/", "engine/", "run/")):
            continue
        for imported in imports(relative, tree):
            # the one exception: what an error of the openai client (the API every adapter's models speak) means
            client = relative == "run/model_errors.py" and imported == "openai"
            assert client or imported.split(".")[0] not in FRAMEWORKS, f"{relative} imports {imported}"
            above = ("agents_loopguard.ops", "agents_loopguard.sdk", "agents_loopguard.function_calling")
            assert not imported.startswith((*above, "agents_loopguard.server", "agents_loopguard.cli")), (
                f"{relative} imports {imported}"
            )
        if relative.startswith(("values/", "engine/")):
            for imported in imports(relative, tree):
                assert not imported.startswith("agents_loopguard.run"), f"the engine imports the run: {relative}"


def test_no_package_module_imports_the_tests() -> None:
    for relative, tree in modules():
        assert not any(name.split(".")[0] == "tests" for name in imports(relative, tree)), relative
        assert "tests.support" not in (PACKAGE / relative).read_text(), f"{relative} names tests.support"


def test_there_is_no_import_cycle_between_the_packages_modules() -> None:
    """Module-level imports only (an import inside a function runs later and cannot cycle at import time)."""
    graph: dict[str, set[str]] = {}
    for relative, tree in modules():
        top = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
        graph[module_name(relative)] = {m for m in imports(relative, top) if m.startswith("agents_loopguard")}
    for name in list(graph):  # `from .x import y`: y may be a module of package x
        graph[name] = {m if m in graph else m.rsplit(".", 1)[0] for m in graph[name]} - {name}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1 and not (node.startswith(nxt + ".") or nxt == "agents_loopguard"):
                pytest.fail(f"import cycle: {' -> '.join([*path, node, nxt])}")
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def _calls(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                yield func.id
            elif isinstance(func, ast.Attribute):
                owner = func.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                yield f"{name}.{func.attr}"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapters_build_no_guard_verdict_or_outcome_and_end_no_task(adapter: str) -> None:
    for relative, tree in modules():
        if not relative.startswith(adapter + "/"):
            continue
        called = set(_calls(tree))
        assert not called & {"Guard", "Verdict", "Outcome"}, f"{relative} builds {called & {'Guard', 'Verdict'}}"
        assert not {c for c in called if c.endswith((".end", ".finish")) and c.startswith("guard")}, relative
        assert not {c for c in called if c.startswith("store.")}, f"{relative} calls the store"


def _named_keywords(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    return len([a for a in args.args + args.kwonlyargs if a.arg not in ("self", "cls")]) + len(args.posonlyargs)


@pytest.mark.parametrize("relative", sorted(ENTRY_POINTS))
def test_no_entry_point_declares_more_than_ten_named_parameters_besides_its_subject(relative: str) -> None:
    tree = ast.parse((PACKAGE / relative).read_text())
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{item.name}"] = _named_keywords(item)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(node.name, _named_keywords(node))
    for name in ENTRY_POINTS[relative]:
        subject = 2  # the agent or client and its input (a tool's function and declaration), or the pause id
        assert found[name] - subject <= 10, f"{relative}:{name} declares {found[name]} parameters"


@pytest.mark.parametrize(
    ("options", "fields", "own"), [(RunOptions, RunFields, set()), (LoopOptions, LoopFields, {"tools"})]
)
def test_the_keyword_fields_are_exactly_the_options_fields(
    options: type[RunOptions], fields: type, own: set[str]
) -> None:
    """``**fields: Unpack[RunFields]`` types what ``RunOptions.merge`` accepts: the two lists cannot drift. ``own``:
    options an entry point takes as a parameter of its own (the raw loop's ``tools=`` is the tools themselves;
    declarations by name come with ``options=``)."""
    expected = {f.name for f in dataclasses.fields(options)} - own
    assert set(fields.__annotations__) | _inherited(fields) == expected


def _inherited(fields: type) -> set[str]:
    return {name for base in fields.__mro__[1:] for name in getattr(base, "__annotations__", {})}


def test_the_servers_workflow_activations_go_through_the_engines_and_the_triggers_doors() -> None:
    """Workflows over HTTP (n8n) are translated, not ruled, by the server: it builds no guard, verdict, ticket or
    call, ends no task, and settles a reserved write only through ``TriggerGuard`` (``Guard.settle_reserved``)."""
    tree = ast.parse((PACKAGE / "server" / "workflows.py").read_text())
    called = set(_calls(tree))
    assert not called & {"Guard", "Verdict", "Outcome", "Ticket", "Call"}, called
    assert not {c for c in called if c.endswith((".end", ".finish", ".settle", ".authorize")) and "guard" in c}
    assert {"trigger.reserve_write", "trigger.finish"} <= called
