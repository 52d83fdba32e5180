"""The architecture holds: data flows one way, and modules stay small.

DESIGN.md: `sandbox` knows nothing of agents or tools, `tools` nothing of
models; inside `agent/` only the application layer, the faces and the
benchmark harnesses (`agent/bench/`) talk to `sandbox`; the runner in
`images/` imports nothing of ours. The faces come in by one door, the public
surface `sbx.agent`: a face imports it, its own package and its framework,
nothing else of sbx (the commands about the sandbox itself excepted); it
never builds a `Workspace` or a `Conversation`, never reaches the app's audit
log, pool or image, and nothing outside the CLI imports the CLI. What the
door exports exists and is documented. No two of `agent/`'s packages import
each other, directly or around a longer loop: what both sides need sits below.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPLICATION_LAYER = {
    "agent/core/app.py", "agent/core/config.py", "agent/core/conversation.py",
    "agent/core/workspace.py", "agent/core/run_recorder.py", "agent/core/artifacts.py",
    "agent/core/limits_request.py", "agent/core/execute_program.py", "agent/core/tool_session.py",
    "agent/core/kept_sessions.py", "agent/core/restore_ready.py",
}
FACES = ("agent/cli/", "agent/mcp/", "agent/service/", "agent/e2b/")
SANDBOX_VALUE_TYPES = (
    "sbx.sandbox.limits", "sbx.sandbox.units", "sbx.sandbox.result", "sbx.sandbox.errors",
    "sbx.sandbox.closing",
)
"""What a face may import from `sandbox/`: values (limits, sizes, results, errors), `Closing`."""
SANDBOX_COMMANDS = {
    "agent/cli/bench.py", "agent/bench/gate.py", "agent/bench/restore.py",
    "agent/cli/image.py", "agent/cli/packages.py",
    "agent/cli/selftest.py", "agent/cli/doctor.py", "agent/cli/gc.py",
    "agent/bench/serve.py", "agent/bench/serve_phases.py",
    "agent/bench/serve_burst.py", "agent/bench/serve_report.py", "agent/bench/every.py",
}
"""`doctor`, `gc`, `selftest`, `bench`, `image`, `packages`: the commands about the sandbox
itself (and the benchmark harnesses behind `sbx bench`)."""
THE_DOOR = "sbx.agent"
"""The public surface (`agent/__init__.py`): the only way a face reaches the rest of sbx."""
ERROR_ROOT = "sbx.sandbox.errors"
"""Where `SbxError` lives (the lowest layer), so every layer's errors can derive from it."""
FACE_PACKAGES = {"agent/cli/": "sbx.agent.cli", "agent/mcp/": "sbx.agent.mcp",
                 "agent/service/": "sbx.agent.service", "agent/e2b/": "sbx.agent.e2b"}
HOSTED_FACES = {"sbx.agent.cli": ("sbx.agent.service", "sbx.agent.mcp"),
                "sbx.agent.service": ("sbx.agent.mcp", "sbx.agent.e2b")}
"""A face that starts another: the CLI runs `sbx serve` and `sbx mcp`; the service serves MCP
and E2B's API."""
BUILT_BY_THE_CORE = {
    "sbx.agent": {"Workspace", "Conversation"},
    "sbx.agent.core.workspace": {"Workspace"},
    "sbx.agent.core.conversation": {"Conversation"},
    "sbx.tools.gate": {"ToolGate", "build_gate"},
}
"""What only the core builds (a face that imports them from elsewhere fails the import check)."""
APP_INSIDES = {"audit", "pool", "image"}
WEB_FRAMEWORKS = ("starlette", "uvicorn", "mcp", "anyio", "python_multipart", "jwt",
                  "prometheus_client")
"""What a face speaks its protocol with; the core (its hosting and store too) imports none."""
WEIGHED_FACES = ("agent/cli", "agent/service", "agent/mcp")
"""The faces that translate for the core (the E2B face is a protocol shim beside them)."""
MAX_MODULE_LINES = 600
"""What one concept may need; a module past it is two concepts (split by meaning, never by size)."""
OVERSIZE_ALLOWED = {"images/runner.py"}  # one stdlib file shipped into the image


def _modules(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _offenders(top: str, forbidden: tuple[str, ...], allowed=lambda rel: False) -> list[str]:
    bad = []
    for path in _modules(top):
        rel = str(path.relative_to(ROOT))
        if allowed(rel):
            continue
        for name in _imports(path):
            if name.startswith(forbidden):
                bad.append(f"{rel} imports {name}")
    return bad


def test_tools_and_sandbox_never_import_the_agent() -> None:
    assert _offenders("tools", ("sbx.agent",)) == []
    assert _offenders("sandbox", ("sbx.agent", "sbx.tools")) == []


def test_inside_agent_only_the_application_layer_faces_and_benchmarks_import_sandbox() -> None:
    def allowed(rel: str) -> bool:
        return (rel in APPLICATION_LAYER or rel.startswith(FACES) or rel in SANDBOX_COMMANDS
                or rel == "agent/__init__.py")  # the door re-exports what faces need

    def value_type(bad: str) -> bool:  # the hosting and its store read sizes like a face does
        rel, name = bad.split(" imports ")
        return name == ERROR_ROOT or (rel.startswith("agent/core/hosting/")
                                      and name in SANDBOX_VALUE_TYPES)

    offenders = _offenders("agent", ("sbx.sandbox",), allowed)
    assert [bad for bad in offenders if not value_type(bad)] == []


def test_the_runner_imports_nothing_of_ours() -> None:
    assert [name for name in _imports(ROOT / "images/runner.py") if name.startswith("sbx")] == []


def test_no_module_is_over_its_budget() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for top in ("agent", "sandbox", "tools", "images")
        for path in _modules(top)
    }
    over = {
        rel: n for rel, n in sizes.items() if n > MAX_MODULE_LINES and rel not in OVERSIZE_ALLOWED
    }
    assert over == {}


def _lines(top: str) -> int:
    return sum(len(path.read_text().splitlines()) for path in _modules(top))


def test_the_faces_weigh_no_more_than_the_core_they_translate_for() -> None:
    """A face parses, calls the door and renders: what it needs beyond that belongs below it."""
    faces = {top: _lines(top) for top in WEIGHED_FACES}
    core = _lines("agent/core")
    assert sum(faces.values()) <= core, f"faces {faces}: {sum(faces.values())} > core {core}"


def test_the_docker_engine_implements_the_sandbox_seam() -> None:
    from sbx.sandbox.backend import ContainerBackend
    from sbx.sandbox.engine import Engine

    calls = {name for name in vars(ContainerBackend) if not name.startswith("_")}
    assert len(calls) == 9
    assert calls <= set(dir(Engine))
    seam: type[ContainerBackend] = Engine  # mypy checks the signatures here
    assert seam is Engine


def _face_modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path)))
        for top in FACES for path in _modules(top)
    ]


def _face_of(rel: str) -> str:
    return next(package for folder, package in FACE_PACKAGES.items() if rel.startswith(folder))


def _outside_the_door(rel: str, tree: ast.Module) -> list[str]:
    """A face's imports of sbx beyond the door, its own package and the faces it starts."""
    if rel in SANDBOX_COMMANDS:
        return []
    own = _face_of(rel)
    allowed = (own, *HOSTED_FACES.get(own, ()))
    bad = []
    for node in ast.walk(tree):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 and node.level == 0
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        bad += [f"{rel} imports {name}" for name in names
                if (name == "sbx" or name.startswith("sbx.")) and name != THE_DOOR
                and not any(name == a or name.startswith(a + ".") for a in allowed)]
    return bad


def _constructions(rel: str, tree: ast.Module) -> list[str]:
    """Calls that build a `Workspace`, a `Conversation` (not a store row) or a gate."""
    built: set[str] = set()  # the local names of the core's classes in this module
    for node in ast.walk(tree):
        if rel in SANDBOX_COMMANDS and isinstance(node, ast.ImportFrom) and (
            node.module == "sbx.tools.gate"
        ):
            continue  # `sbx bench` measures the gate itself
        if isinstance(node, ast.ImportFrom) and node.module in BUILT_BY_THE_CORE:
            built |= {alias.asname or alias.name for alias in node.names
                      if alias.name in BUILT_BY_THE_CORE[node.module]}
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in built:
            bad.append(f"{rel}:{node.lineno} builds {func.id}")
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
            (func.value.id, func.attr) in {("workspace", "Workspace"),
                                           ("conversation", "Conversation")}
        ):
            bad.append(f"{rel}:{node.lineno} builds {func.attr}")
    return bad


def _app_insides(rel: str, tree: ast.Module) -> list[str]:
    """Reads of the app's audit log, pool or image, or of any object's workspace (they never
    leave the core: a face asks the conversation or session what it needs to know)."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "workspace":
            bad.append(f"{rel}:{node.lineno} reads .workspace")
        elif isinstance(node, ast.Attribute) and node.attr in APP_INSIDES:
            owner = node.value
            named = owner.id if isinstance(owner, ast.Name) else (
                owner.attr if isinstance(owner, ast.Attribute) else "")
            if named == "app":
                bad.append(f"{rel}:{node.lineno} reads app.{node.attr}")
    return bad


def test_faces_import_only_the_door_their_own_package_and_their_framework() -> None:
    assert [bad for rel, tree in _face_modules() for bad in _outside_the_door(rel, tree)] == []


def test_faces_never_build_a_workspace_a_conversation_or_a_gate() -> None:
    assert [bad for rel, tree in _face_modules() for bad in _constructions(rel, tree)] == []


RUN_MACHINERY = {"Workspace", "ToolGate", "build_gate", "open_gate", "workspace", "_workspace"}
"""What a run is built from: only the core builds a workspace or opens a gate, in the door's
methods (`App.execute`, `App.tool_session`, `App.rerun`, a conversation's run)."""


def _run_machinery(rel: str, tree: ast.Module) -> list[str]:
    """Calls that build a workspace or open a gate, by name or as a method."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if name in RUN_MACHINERY:
                bad.append(f"{rel}:{node.lineno} calls {name}")
    return bad


def test_only_the_core_builds_a_workspace_or_opens_a_gate() -> None:
    bad = []
    for path in _modules("agent"):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("agent/core/") or rel == "agent/bench/gate.py":  # it measures the gate
            continue
        bad += _run_machinery(rel, ast.parse(path.read_text(), filename=rel))
    assert bad == []
    rerun = ast.parse("w = app._workspace(spec)\ng = w.open_gate('r-1')\nbuild_gate(p)\n")
    assert _run_machinery("agent/replay/x.py", rerun) == [
        "agent/replay/x.py:1 calls _workspace", "agent/replay/x.py:2 calls open_gate",
        "agent/replay/x.py:3 calls build_gate"]


def test_faces_never_reach_the_apps_audit_log_pool_image_or_a_workspace() -> None:
    assert [bad for rel, tree in _face_modules() for bad in _app_insides(rel, tree)] == []


def test_nothing_outside_the_cli_imports_the_cli() -> None:
    def allowed(rel: str) -> bool:
        return rel.startswith("agent/cli/")

    offenders = [bad for top in ("agent", "tools", "sandbox", "images")
                 for bad in _offenders(top, ("sbx.agent.cli",), allowed)]
    assert offenders == []


def test_the_core_its_store_and_the_benchmarks_import_no_face() -> None:
    """What sits beside the core (DESIGN.md) serves every face, so it never reaches up into one."""
    for top in ("agent/core", "agent/bench", "agent/model", "agent/testing"):
        assert _offenders(top, ("sbx.agent.cli", "sbx.agent.service", "sbx.agent.mcp")) == []


def test_the_core_and_its_hosting_speak_no_protocol() -> None:
    """Hosting many tenants is the core's; HTTP, MCP and E2B's API are each a face's."""
    assert _offenders("agent/core", WEB_FRAMEWORKS) == []
    assert _offenders("agent/core", ("sbx.agent.e2b",)) == []


def test_the_face_checks_fail_on_a_face_that_does_what_they_forbid() -> None:
    face = ast.parse(
        "from sbx.sandbox.pool import Pool\n"
        "from sbx.agent import Limits, safe_text\n"
        "from sbx.agent.core.workspace import Workspace as W\n"
        "from sbx.agent.core import conversation\n"
        "from sbx.agent import ConversationRow\n"
        "w = W(spec=None, config=None, audit=app.audit, pool=service.app.pool, image=app.image)\n"
        "c = conversation.Conversation()\n"
        "row = ConversationRow(id='conv-1')\n"
        "limit = session.workspace.config.limits\n"
    )
    assert _outside_the_door("agent/service/x.py", face) == [
        "agent/service/x.py imports sbx.sandbox.pool",
        "agent/service/x.py imports sbx.agent.core.workspace",
        "agent/service/x.py imports sbx.agent.core"]
    assert _outside_the_door("agent/cli/doctor.py", face) == []
    below = ast.parse("from sbx.tools.text_safety import safe_text\nimport sbx.images.build\n"
                      "from sbx.agent.core.hosting.store.models import Run\n"
                      "from sbx.agent.mcp import server\nfrom sbx.agent.cli.errors import fail\n")
    assert _outside_the_door("agent/mcp/x.py", below) == [
        "agent/mcp/x.py imports sbx.tools.text_safety", "agent/mcp/x.py imports sbx.images.build",
        "agent/mcp/x.py imports sbx.agent.core.hosting.store.models",
        "agent/mcp/x.py imports sbx.agent.cli.errors"]
    assert _outside_the_door("agent/service/web/x.py", below) == [
        "agent/service/web/x.py imports sbx.tools.text_safety",
        "agent/service/web/x.py imports sbx.images.build",
        "agent/service/web/x.py imports sbx.agent.core.hosting.store.models",
        "agent/service/web/x.py imports sbx.agent.cli.errors"]
    scripted = ast.parse("from sbx.agent.testing.scripted_model import ScriptedLLM\n")
    assert _outside_the_door("agent/cli/demo.py", scripted) == [
        "agent/cli/demo.py imports sbx.agent.testing.scripted_model"]
    assert _constructions("agent/mcp/x.py", face) == [
        "agent/mcp/x.py:6 builds W", "agent/mcp/x.py:7 builds Conversation"]
    assert sorted(_app_insides("f.py", face)) == [
        "f.py:6 reads app.audit", "f.py:6 reads app.image", "f.py:6 reads app.pool",
        "f.py:9 reads .workspace"]


def _typed_door() -> dict[str, tuple[str, str]]:
    """What the door's `TYPE_CHECKING` block imports: public name -> (module, name there)."""
    tree = ast.parse((ROOT / "agent/__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    return {alias.asname or alias.name: (node.module or "", alias.name)
            for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_the_door_exports_what_it_lists_and_documents_each_name() -> None:
    import sbx.agent as door

    resolved = {name: (door._EXPORTS[name], door._RENAMED.get(name, name)) for name in door.__all__}
    assert sorted(door.__all__) == sorted(door._EXPORTS)
    assert _typed_door() == resolved  # what mypy sees is what a face gets
    undocumented = []
    for name in door.__all__:
        value = getattr(door, name)
        if not re.search(rf"\b{name}\b", door.__doc__ or ""):
            undocumented.append(f"{name}: not on the door's map")
        own = value.__dict__.get("__doc__") if inspect.isclass(value) else getattr(
            value, "__doc__", None) if inspect.isfunction(value) else "a value"
        if not own or own.startswith(f"{name}("):  # a dataclass's generated signature
            undocumented.append(f"{name}: no docstring")
    assert undocumented == []


def test_the_door_has_one_error_root() -> None:
    import sbx.agent as door

    errors = [getattr(door, name) for name in door.__all__
              if inspect.isclass(getattr(door, name))
              and issubclass(getattr(door, name), Exception)]
    assert door.SbxError in errors
    outside = {error.__name__ for error in errors if not issubclass(error, door.SbxError)}
    assert outside == {"Refused"}  # the host's refusal, which the calling model reads


def test_the_door_imports_only_what_is_asked_for() -> None:
    """`from sbx.agent import safe_text` must not pull in the model SDK, the store or the pool."""
    code = ("import sys\nfrom sbx.agent import safe_text, format_size, SbxError\n"
            "heavy = ('openai', 'sbx.agent.core.hosting.store', 'sbx.sandbox.pool',\n"
            "         'sbx.agent.core.app')\n"
            "print([m for m in heavy if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def _package_of(rel: str) -> str:
    """`agent/core/app.py` -> `core`; the door (`agent/__init__.py`) is `sbx.agent`."""
    parts = Path(rel).parts
    return parts[1] if len(parts) > 2 else THE_DOOR


def _package_graph() -> dict[str, set[str]]:
    """Which of `agent/`'s packages each imports (the door counts as one).

    Every import counts: at module level, inside a function and under
    `TYPE_CHECKING`. A lazy import is still a dependency when it runs, and moving an
    import into a function is the usual way a loop is hidden rather than cut.
    """
    graph: dict[str, set[str]] = {}
    for path in _modules("agent"):
        rel = str(path.relative_to(ROOT))
        source = _package_of(rel)
        for name in _imports(path):
            parts = name.split(".")
            if parts[:2] != ["sbx", "agent"]:
                continue
            target = parts[2] if len(parts) > 2 else THE_DOOR
            if target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def _loop(graph: dict[str, set[str]]) -> list[str]:
    """One import loop of `graph` as its packages in order (`[a, b, a]`), or [] when none."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*path[path.index(target):], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = "done"
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_loop_among_the_agents_packages() -> None:
    graph = _package_graph()
    assert {"model", "provenance", "replay"} <= graph["core"]  # the graph is read at all
    assert _loop(graph) == []


def test_the_loop_check_finds_direct_and_longer_loops() -> None:
    assert _loop({"core": {"model"}, "model": {"core"}}) == ["core", "model", "core"]
    assert _loop({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _loop({"cli": {"core", "service"}, "service": {"core"}, "core": {"model"}}) == []
