"""The architecture holds: data flows one way, and modules stay small.

DESIGN.md: `sandbox` knows nothing of agents or tools, `tools` nothing of
models; inside `agent/` only the application layer, the faces and the
benchmark harnesses (`agent/bench/`) talk to `sandbox`; the runner in
`images/` imports nothing of ours. The faces go through the one front door
(issue 19): they import only the sandbox's value types (the commands about
the sandbox itself excepted), never build a `Workspace` or a `Conversation`,
never reach the app's audit log, pool or image, and nothing outside the CLI
imports the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPLICATION_LAYER = {
    "agent/core/app.py", "agent/core/config.py", "agent/core/conversation.py",
    "agent/core/workspace.py", "agent/core/run_recorder.py", "agent/core/artifacts.py",
    "agent/core/limits_request.py", "agent/core/execute_program.py", "agent/core/tool_session.py",
}
FACES = ("agent/cli/", "agent/mcp/", "agent/service/")
SANDBOX_VALUE_TYPES = (
    "sbx.sandbox.limits", "sbx.sandbox.units", "sbx.sandbox.result", "sbx.sandbox.errors",
    "sbx.sandbox.closing",
)
"""What a face may import from `sandbox/`: values (limits, sizes, results, errors), `Closing`."""
SANDBOX_COMMANDS = {
    "agent/cli/bench.py", "agent/bench/gate.py", "agent/bench/restore.py",
    "agent/cli/image.py",
    "agent/cli/selftest.py", "agent/cli/doctor.py", "agent/cli/gc.py",
    "agent/bench/serve.py", "agent/bench/serve_phases.py",
}
"""`doctor`, `gc`, `selftest`, `bench`, `image`: the commands about the sandbox itself."""
BUILT_BY_THE_CORE = {
    "sbx.agent.core.workspace": {"Workspace"},
    "sbx.agent.core.conversation": {"Conversation"},
    "sbx.tools.gate": {"ToolGate", "build_gate"},
}
"""What only the core builds (a face that imports them from elsewhere fails the import check)."""
APP_INSIDES = {"audit", "pool", "image"}
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
        return rel in APPLICATION_LAYER or rel.startswith(FACES) or rel in SANDBOX_COMMANDS

    def store_value_type(bad: str) -> bool:  # the store reads sizes like a face does
        rel, name = bad.split(" imports ")
        return rel.startswith("agent/store/") and name in SANDBOX_VALUE_TYPES

    offenders = _offenders("agent", ("sbx.sandbox",), allowed)
    assert [bad for bad in offenders if not store_value_type(bad)] == []


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


def _sandbox_machinery(rel: str, tree: ast.Module) -> list[str]:
    """Imports of `sandbox/` beyond its value types (the sandbox commands excepted)."""
    if rel in SANDBOX_COMMANDS:
        return []
    bad = []
    for node in ast.walk(tree):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        bad += [f"{rel} imports {name}" for name in names
                if name.startswith("sbx.sandbox") and not name.startswith(SANDBOX_VALUE_TYPES)]
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
    """Reads of the app's audit log, pool or image (they never leave the core)."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in APP_INSIDES:
            owner = node.value
            named = owner.id if isinstance(owner, ast.Name) else (
                owner.attr if isinstance(owner, ast.Attribute) else "")
            if named == "app":
                bad.append(f"{rel}:{node.lineno} reads app.{node.attr}")
    return bad


def test_faces_import_only_the_sandbox_value_types() -> None:
    assert [bad for rel, tree in _face_modules() for bad in _sandbox_machinery(rel, tree)] == []


def test_faces_never_build_a_workspace_a_conversation_or_a_gate() -> None:
    assert [bad for rel, tree in _face_modules() for bad in _constructions(rel, tree)] == []


def test_faces_never_reach_the_apps_audit_log_pool_or_image() -> None:
    assert [bad for rel, tree in _face_modules() for bad in _app_insides(rel, tree)] == []


def test_nothing_outside_the_cli_imports_the_cli() -> None:
    def allowed(rel: str) -> bool:
        return rel.startswith("agent/cli/")

    offenders = [bad for top in ("agent", "tools", "sandbox", "images")
                 for bad in _offenders(top, ("sbx.agent.cli",), allowed)]
    assert offenders == []


def test_the_core_the_store_and_the_benchmarks_import_no_face() -> None:
    """What sits beside the core (DESIGN.md) serves every face, so it never reaches up into one."""
    for top in ("agent/core", "agent/store", "agent/bench", "agent/model", "agent/testing"):
        assert _offenders(top, ("sbx.agent.cli", "sbx.agent.service", "sbx.agent.mcp")) == []


def test_the_face_checks_fail_on_a_face_that_does_what_they_forbid() -> None:
    face = ast.parse(
        "from sbx.sandbox.pool import Pool\n"
        "from sbx.sandbox.limits import Limits\n"
        "from sbx.agent.core.workspace import Workspace as W\n"
        "from sbx.agent.core import conversation\n"
        "from sbx.agent.store.models import Conversation\n"
        "w = W(spec=None, config=None, audit=app.audit, pool=service.app.pool, image=app.image)\n"
        "c = conversation.Conversation()\n"
        "row = Conversation(id='conv-1')\n"
    )
    assert _sandbox_machinery("agent/service/x.py", face) == [
        "agent/service/x.py imports sbx.sandbox.pool"]
    assert _sandbox_machinery("agent/cli/doctor.py", face) == []
    assert _constructions("agent/mcp/x.py", face) == [
        "agent/mcp/x.py:6 builds W", "agent/mcp/x.py:7 builds Conversation"]
    assert sorted(_app_insides("f.py", face)) == [
        "f.py:6 reads app.audit", "f.py:6 reads app.image", "f.py:6 reads app.pool"]
