"""The architecture holds: data flows one way, and modules stay small.

DESIGN.md: `sandbox` knows nothing of agents or tools, `tools` nothing of
models; inside `agent/` only the application layer and the faces talk to
`sandbox`; the runner in `images/` imports nothing of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPLICATION_LAYER = {
    "agent/core/app.py", "agent/core/config.py", "agent/core/conversation.py",
    "agent/core/workspace.py", "agent/core/limits_request.py", "agent/core/execute_program.py",
}
FACES = ("agent/cli/", "agent/mcp/", "agent/service/")
MAX_MODULE_LINES = 400
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


def test_inside_agent_only_the_application_layer_and_faces_import_sandbox() -> None:
    def allowed(rel: str) -> bool:
        return rel in APPLICATION_LAYER or rel.startswith(FACES)

    assert _offenders("agent", ("sbx.sandbox",), allowed) == []


SANDBOX_VALUE_TYPES = (
    "sbx.sandbox.errors", "sbx.sandbox.result", "sbx.sandbox.units", "sbx.sandbox.limits",
)
"""What any face may take from `sandbox/`: its errors, results, units and limits."""
SANDBOX_COMMANDS = {
    "agent/cli/doctor.py", "agent/cli/selftest.py", "agent/cli/bench.py",
    "agent/cli/bench_gate.py", "agent/cli/bench_restore.py", "agent/cli/image.py",
}
"""The commands about the sandbox itself, which may reach its machinery."""
BUILT_BY_THE_CORE = {"Workspace", "Conversation", "Session", "Pool", "Engine", "ToolGate"}


def test_cli_commands_reach_sandbox_machinery_only_when_they_are_about_the_sandbox() -> None:
    def allowed(rel: str) -> bool:
        return rel in SANDBOX_COMMANDS

    machinery = [
        offence for offence in _offenders("agent/cli", ("sbx.sandbox",), allowed)
        if not offence.split(" imports ")[1].startswith(SANDBOX_VALUE_TYPES)
    ]
    assert machinery == []


def test_cli_commands_build_no_workspace_conversation_or_sandbox_themselves() -> None:
    built = []
    for path in _modules("agent/cli"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name in BUILT_BY_THE_CORE:
                    built.append(f"{path.relative_to(ROOT)} calls {name}(...)")
    assert built == []


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
