"""E2B's own SDK, unchanged, against a real `sbx serve` and real Docker (the E2B face).

The SDK is configured only by its own settings (`E2B_API_URL`,
`E2B_SANDBOX_URL`, `E2B_API_KEY`: an sbx key). Waits are on events (a
streamed line, an audit record), never on the clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import (
    CommandExitException,
    NotFoundException,
    PtySize,
    RateLimitException,
    SandboxException,
    TimeoutException,
)
from e2b_code_interpreter import AsyncSandbox, Sandbox

import service_support
from service_support import SBX, Server, wait_for

ROOT = Path(__file__).resolve().parents[1]
serve = service_support.serve
llm = service_support.llm


def point_sdk_at(monkeypatch: pytest.MonkeyPatch, server: Server, key: str) -> None:
    """Only the SDK's own settings: where the control plane and sandbox URL are, and the key."""
    monkeypatch.setenv("E2B_API_URL", f"{server.url}/e2b/api")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", key)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    monkeypatch.delenv("E2B_DEBUG", raising=False)


def audit_records(server: Server) -> list[dict[str, Any]]:
    """The server's audit log, record by record."""
    path: Path = server.audit_log
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def _executions(server, sandbox_id: str) -> list[dict]:
    return [r for r in audit_records(server) if r.get("run_id") == sandbox_id
            and r.get("event") == "outcome" and r["data"].get("tool") == "execute_python"]


@pytest.mark.docker
def test_the_sync_sdk_runs_code_statefully_streams_counts_errors_and_files(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite)
    point_sdk_at(monkeypatch, server, server.key("ann"))
    sandbox = Sandbox.create(envs={"GREETING": "hello from create"}, metadata={"job": "t1"})
    try:
        first = sandbox.run_code("x = 20")
        heard: list[tuple[str, str]] = []
        second = sandbox.run_code(
            "import sys, time\nprint('one', flush=True)\ntime.sleep(0.3)\n"
            "print('two', file=sys.stderr, flush=True)\ntime.sleep(0.3)\nprint(x + 22)",
            on_stdout=lambda m: heard.append(("out", m.line)),
            on_stderr=lambda m: heard.append(("err", m.line)))
        assert first.error is None and first.execution_count == 1
        assert second.execution_count == 2
        assert "".join(text for _, text in heard) == "one\ntwo\n42\n"
        assert [kind for kind, _ in heard] == ["out", "err", "out"]
        assert "".join(second.logs.stdout) == "one\n42\n"
        assert "".join(second.logs.stderr) == "two\n"
        failed = sandbox.run_code("def f():\n    return 1 / 0\nf()")
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        assert failed.error.value == "division by zero"
        assert "return 1 / 0" in failed.error.traceback and failed.execution_count == 3
        greeting = sandbox.run_code("import os\nprint(os.environ['GREETING'])")
        assert greeting.logs.stdout == ["hello from create\n"]
        both = "import os\nprint(os.environ['GREETING'], os.environ.get('ONCE'))"
        once = sandbox.run_code(both, envs={"GREETING": "for one run", "ONCE": "yes"})
        assert once.logs.stdout == ["for one run yes\n"]
        assert sandbox.run_code(both).logs.stdout == ["hello from create None\n"]
        _files_round_trip(sandbox)
        with pytest.raises(SandboxException, match=r"\[tools.run_command\] enabled = true"):
            sandbox.commands.run("ls")  # off unless the operator's policy enables it
        _independent_contexts(sandbox)
        with pytest.raises(SandboxException, match="custom templates") as unknown:
            Sandbox.create(template="my-custom-template")
        assert getattr(unknown.value, "status_code", None) == 404  # E2B's unknown template
        sandbox_id = sandbox.sandbox_id
        assert [s.sandbox_id for s in Sandbox.list().next_items()] == [sandbox_id]
        assert Sandbox.get_info(sandbox_id).metadata == {"job": "t1"}
    finally:
        sandbox.kill()
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox_id)
    outcomes = [r for r in audit_records(server) if r.get("event") == "outcome"]
    assert len(outcomes) >= 20  # every execution, file operation and context program
    assert {r["run_id"] for r in outcomes} == {sandbox_id}  # each names the E2B sandbox
    verified = subprocess.run([*SBX, "audit", "verify", str(server.audit_log)],
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _independent_contexts(sandbox: Sandbox) -> None:
    context = sandbox.create_code_context(cwd="/home/user/elsewhere")
    sandbox.run_code("x = 'in the context'", context=context)
    assert sandbox.run_code("print(x)", context=context).logs.stdout == ["in the context\n"]
    assert sandbox.run_code("print(x)").logs.stdout == ["20\n"]  # default's own x
    cwd = sandbox.run_code("import os\nos.getcwd()", context=context)
    assert (cwd.text, cwd.logs.stdout) == ("'/home/user/elsewhere'", [])  # a value, not a log
    assert {c.id for c in sandbox.list_code_contexts()} == {"default", context.id}
    sandbox.restart_code_context("default")  # its variables go, the context's stay
    cleared = sandbox.run_code("x")
    assert cleared.error is not None and cleared.error.name == "NameError"
    assert sandbox.run_code("print(x)", context=context).logs.stdout == ["in the context\n"]
    sandbox.restart_code_context(context)
    gone = sandbox.run_code("x", context=context)
    assert gone.error is not None and gone.error.name == "NameError"
    sandbox.remove_code_context(context)
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=context)
    with pytest.raises(SandboxException, match="Python only"):
        sandbox.run_code("1", language="r")


def _files_round_trip(sandbox: Sandbox) -> None:
    sandbox.files.write("notes/hello.txt", "hello from E2B")
    sandbox.files.write("/home/user/blob.bin", b"\x00\x01\xfe\xff")
    assert sandbox.files.read("/home/user/notes/hello.txt") == "hello from E2B"
    assert bytes(sandbox.files.read("blob.bin", format="bytes")) == b"\x00\x01\xfe\xff"
    assert sandbox.run_code("print(open('notes/hello.txt').read())").logs.stdout == [
        "hello from E2B\n"]
    made = sandbox.run_code("import os\nopen('/home/user/by_code.txt', 'w').write('by code')\n"
                            "os.getcwd()")
    assert made.text == "'/home/user'"  # E2B's home, where its code starts
    assert sandbox.files.read("by_code.txt") == "by code"
    names = {entry.name for entry in sandbox.files.list("/home/user")}
    assert {"notes", "blob.bin"} <= names
    assert sandbox.files.exists("blob.bin") and not sandbox.files.exists("missing.txt")
    assert sandbox.files.make_dir("made/deeper") is True
    assert sandbox.files.make_dir("made/deeper") is False
    moved = sandbox.files.rename("blob.bin", "made/blob.bin")
    assert moved.path == "/home/user/made/blob.bin"
    sandbox.files.remove("made")
    assert not sandbox.files.exists("made/blob.bin")
    with pytest.raises(SandboxException, match="not supported"):
        sandbox.files.watch_dir("/home/user")


@pytest.mark.docker
def test_shell_commands_run_through_the_gate_when_the_policy_enables_them(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite, policy={"tools.run_command": {"enabled": True},
                                   "tools": {"timeout": "1s"},  # a command: the sandbox's
                                   "sandbox": {"timeout": "5s"}})
    point_sdk_at(monkeypatch, server, server.key("ann"))
    with Sandbox.create(envs={"WHO": "ann"}) as sandbox:
        heard: list[str] = []
        done = sandbox.commands.run("echo hi; echo to-err >&2; echo $WHO $ONCE; pwd",
                                    envs={"ONCE": "now"}, on_stdout=heard.append)
        assert (done.exit_code, done.stdout, done.stderr) == (0, "hi\nann now\n/home/user\n",
                                                              "to-err\n")
        assert "".join(heard) == done.stdout
        assert sandbox.commands.run("sleep 2; echo slept").stdout == "slept\n"
        sandbox.files.write("made-by-python.txt", "from the files API")
        assert sandbox.commands.run("cat made-by-python.txt").stdout == "from the files API"
        with pytest.raises(CommandExitException) as failed:
            sandbox.commands.run("exit 3")
        assert failed.value.exit_code == 3
        sandbox.run_code("kept = 'before'")
        with pytest.raises(CommandExitException) as killed:
            sandbox.commands.run("sleep 60")  # killed at the sandbox's timeout
        assert killed.value.exit_code == 124 and "timed out" in (killed.value.error or "")
        assert sandbox.run_code("print(kept)").logs.stdout[-1] == "before\n"  # replayed
        assert sandbox.commands.list() == []  # each command ran to its end
        with pytest.raises(SandboxException, match="not supported"):
            sandbox.commands.connect(1)
        with pytest.raises(SandboxException, match="a PTY is not supported"):
            sandbox.pty.create(PtySize(rows=24, cols=80))
        sandbox_id = sandbox.sandbox_id
    commands = [r for r in audit_records(server) if r.get("run_id") == sandbox_id
                and r.get("event") == "outcome" and r["data"].get("tool") == "run_command"]
    assert [r["data"].get("exit_code") for r in commands] == [0, 0, 0, 3, 124]
    verified = subprocess.run([*SBX, "audit", "verify", str(server.audit_log)],
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.docker
def test_the_async_sdk_survives_a_client_timeout_and_a_kill_ends_a_running_execution(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite)
    point_sdk_at(monkeypatch, server, server.key("ann"))

    async def scenario() -> None:
        sandbox = await AsyncSandbox.create(envs={"WHERE": "async"})
        await sandbox.run_code("kept = 'still here'")
        await sandbox.files.write("async.txt", "written by the async SDK")
        assert await sandbox.files.read("/home/user/async.txt") == "written by the async SDK"
        assert await sandbox.files.exists("async.txt")
        envs = await sandbox.run_code("import os\nprint(os.environ['WHERE'], os.environ['NOW'])",
                                      envs={"NOW": "once"})
        assert envs.logs.stdout == ["async once\n"]
        context = await sandbox.create_code_context()
        await sandbox.run_code("kept = 'the context'", context=context)
        assert [c.id for c in await sandbox.list_code_contexts()] == ["default", context.id]
        await sandbox.remove_code_context(context)
        with pytest.raises(TimeoutException):  # the client gives up: the execution is stopped
            await sandbox.run_code("import time\ntime.sleep(600)", timeout=2)
        wait_for(lambda: "cancelled" in [r["data"].get("status") for r in _executions(
            server, sandbox.sandbox_id)], what="the abandoned execution cancelled")
        after = await sandbox.run_code("print(kept)")
        assert after.error is None and after.logs.stdout == ["still here\n"]

        started = asyncio.Event()
        running = asyncio.create_task(sandbox.run_code(
            "import time\nprint('running', flush=True)\ntime.sleep(60)",
            on_stdout=lambda m: started.set()))
        await asyncio.wait_for(started.wait(), 60)
        await sandbox.kill()
        with pytest.raises(TimeoutException, match="killed"):
            await asyncio.wait_for(running, 60)
        assert not await sandbox.is_running()

    asyncio.run(scenario())
    wait_for(lambda: not service_support.server_containers(engine, server),
             what="the killed sandbox's container removed")


@pytest.mark.docker
def test_connect_after_an_idle_release_or_a_pause_finds_the_variables(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite, policy={"service": {"idle_timeout": "1s", "heartbeat": "0.2s"}})
    point_sdk_at(monkeypatch, server, server.key("ann"))
    sandbox = Sandbox.create()
    sandbox.run_code("answer = 6 * 7")
    sandbox_id = sandbox.sandbox_id
    wait_for(lambda: [r for r in audit_records(server) if r.get("run_id") == sandbox_id
                      and r.get("event") == "sandbox_reset"], what="the idle release")
    again = Sandbox.connect(sandbox_id)
    assert again.run_code("print(answer)").logs.stdout == ["42\n"]
    again.pause()
    assert Sandbox.get_info(sandbox_id).state.value == "paused"
    resumed = Sandbox.connect(sandbox_id)
    assert resumed.run_code("print(answer + 1)").logs.stdout == ["43\n"]
    resumed.kill()


@pytest.mark.docker
def test_another_keys_sandbox_is_not_found_and_over_quota_is_the_rate_limit_error(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite)
    ann, bob = server.key("ann", max_conversations=1), server.key("bob")
    point_sdk_at(monkeypatch, server, ann)
    sandbox = Sandbox.create()
    sandbox.run_code("secret = 'ann only'")
    with pytest.raises(RateLimitException, match="max_conversations"):
        Sandbox.create()
    point_sdk_at(monkeypatch, server, bob)
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
    assert Sandbox.kill(sandbox.sandbox_id) is False
    assert Sandbox.list().next_items() == []
    other = Sandbox.create()
    with httpx.Client(base_url=f"{server.url}/e2b/sandbox", timeout=60) as client:
        wrong = client.post("/execute", json={"code": "print(secret)"}, headers={
            "E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49999",
            "X-Access-Token": other._envd_access_token or ""})
    assert wrong.status_code == 404  # the sandbox URL takes only the sandbox's own token
    other.kill()
    point_sdk_at(monkeypatch, server, ann)
    assert sandbox.run_code("print(secret)").logs.stdout == ["ann only\n"]
    sandbox.kill()
    point_sdk_at(monkeypatch, server, server.key("cap", runs_per_hour=2))
    capped = Sandbox.create()
    capped.run_code("ran = 1")
    capped.run_code("ran += 1")
    with pytest.raises(SandboxException, match="429.*runs_per_hour"):
        capped.run_code("ran += 1")
    capped.kill()


@pytest.mark.docker
def test_over_the_money_budget_mid_session_is_refused_with_the_retry_time(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite, policy={"agent.prices": {"currency": "EUR"},
                                   "agent.prices.sandbox": {"cpu_second": 1.0}})
    point_sdk_at(monkeypatch, server, server.key("spender", cost_per_day=0.2))
    with Sandbox.create() as sandbox:
        burnt = sandbox.run_code("import time\nend = time.process_time() + 0.5\n"
                                 "while time.process_time() < end:\n    pass")
        assert burnt.error is None  # it ran: its cost passes the day's budget
        with pytest.raises(SandboxException) as refused:
            sandbox.run_code("print('over budget')")
        # the code interpreter's SDK raises its own SandboxException for every status
        # but 404 and 502; the message is E2B's body, naming the budget and the retry time
        assert re.search(r"^429 .*per day \(0\.2 EUR\).*retry in \d+ s", str(refused.value))
        with pytest.raises(RateLimitException, match=r"retry in \d+ s"):
            sandbox.files.write("more.txt", "a file operation is a run too")


@pytest.mark.docker
def test_the_readme_example_runs_as_written(sqlite, serve, engine):
    server = serve(sqlite)
    section = (ROOT / "README.md").read_text().split("### Your E2B code on your own machines")[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    script = "\n".join(line for line in block.group(1).splitlines()
                       if "pip install" not in line)  # installed here; no registry in tests
    script = script.replace("http://127.0.0.1:8700", server.url)
    script = script.replace(".venv/bin/python", sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    done = subprocess.run(["bash", "-euc", script], env={**env, "KEY": server.key("ann")},
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['42\\n']"


@pytest.mark.docker
def test_sigterm_gives_a_running_execution_the_grace_then_cancels_it(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite, args=("--grace", "2s"))
    point_sdk_at(monkeypatch, server, server.key("ann"))
    sandbox = Sandbox.create()
    sandbox_id = sandbox.sandbox_id
    started = threading.Event()
    threading.Thread(target=lambda: started.wait(120) and server.proc.send_signal(
        signal.SIGTERM), daemon=True).start()
    ended = sandbox.run_code("import time\nprint('started', flush=True)\ntime.sleep(600)",
                             on_stdout=lambda m: started.set(), timeout=120)
    assert ended.error is not None and ended.error.name == "CancelledError"
    assert server.stop() == 0
    assert not service_support.server_containers(engine, server)
    mine = [r for r in audit_records(server) if r.get("run_id") == sandbox_id]
    # the sandbox's start (its working directory, /home/user), then the cancelled execution
    assert [r["data"].get("status") for r in mine if r["event"] == "outcome"] == [
        "ok", "cancelled"]
    assert mine[-1]["event"] == "run_end"


@pytest.mark.docker
def test_the_policys_execution_timeout_holds_and_the_next_execution_works(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite, policy={"sandbox": {"timeout": "2s"}})
    point_sdk_at(monkeypatch, server, server.key("ann"))
    with Sandbox.create() as sandbox:
        sandbox.run_code("kept = 'before'")
        slow = sandbox.run_code("import time\ntime.sleep(60)", timeout=120)
        assert slow.error is not None and slow.error.name == "TimeoutError"
        after = sandbox.run_code("print(kept)")
        assert after.error is None and after.logs.stdout[-1] == "before\n"
        assert "[sbx]" in "".join(after.logs.stderr)  # told what was restored


@pytest.mark.docker
def test_a_sandbox_past_its_timeout_is_killed_and_set_timeout_moves_it(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite)
    point_sdk_at(monkeypatch, server, server.key("ann"))
    sandbox = Sandbox.create(timeout=600)
    sandbox.run_code("x = 1")
    sandbox.set_timeout(1)
    wait_for(lambda: not sandbox.is_running(), timeout=30, what="the sandbox killed at its timeout")
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
    wait_for(lambda: not service_support.server_containers(engine, server),
             what="its container removed")


@pytest.mark.docker
def test_another_key_gets_the_host_from_one_keys_idle_e2b_sandboxes(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite, env={"SBX_MAX_SANDBOXES": "2", "SBX_HOST_WAIT": "30"})
    ann = server.key("ann")
    point_sdk_at(monkeypatch, server, ann)
    held = [Sandbox.create(), Sandbox.create()]  # ann's two hold the host's two
    for number, sandbox in enumerate(held):
        sandbox.run_code(f"mine = {number}")
    point_sdk_at(monkeypatch, server, server.key("bob"))
    with Sandbox.create() as bobs:
        assert bobs.run_code("print(40 + 2)").logs.stdout == ["42\n"]
    point_sdk_at(monkeypatch, server, ann)
    assert held[0].run_code("print(mine)").logs.stdout == ["0\n"]  # released, then restored
    for sandbox in held:
        sandbox.kill()
