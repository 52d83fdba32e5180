"""The two sides of `sbx bench serve`: the same conversations over HTTP and through the core.

    ServerProcess   a real `sbx serve` on 127.0.0.1 (port 0), its own data dir and SQLite
                    store, the scripted model; stopped with SIGTERM, which must exit 0
    process_cpu_s   CPU seconds of a process and its children (the server and any worker
                    processes it runs, or this one's for the core)
    host_busy_s     CPU seconds the whole host was busy (the engine and containers too)
    Opening         the point every conversation of a phase passes after its first answer,
                    where the host's CPU is read (what opening a conversation costs), and
                    both pools refill while the bench polls them (not a question's CPU)
    http_phase      N concurrent conversations (one API key each), Q questions in turn;
                    each question: POST, then its Server-Sent Events until the run's end
    core_phase      the same N x Q through `App` / `Conversation` in this process

Every wait is bounded (`DEADLINE_S` per phase, the HTTP client's timeouts,
the server's start and exit), and every request goes to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from threading import BrokenBarrierError
from typing import Any

import httpx2

from sbx.agent.bench.serve_options import ServeBenchError
from sbx.agent.core.app import App
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import Reply, ScriptedCall, ScriptedRequest
from sbx.sandbox.bench.first_question import CSV_ROWS
from sbx.sandbox.bench.host import process_cpu_ticks

FAKE_KEY = "sk-bench-SCRIPTED0123456789abcdefghij"
MODEL = "scripted"
CSV_PATH = "/data/sales.csv"
"""Where each conversation's dataset (`sbx.sandbox.bench.first_question.write_csv`) is seen."""
CODE = ("import pandas as pd\nif 'frame' not in globals():\n"
        f"    frame = pd.read_csv({CSV_PATH!r})\n"
        "n = globals().get('n', 0) + 1\n"
        "print('question', n, 'rows', len(frame))")
"""Each question's program: the first reads the 10 MB CSV (a new conversation's first pandas
question), later ones use the DataFrame and the variable the previous one left."""
DEADLINE_S = 900.0
"""A phase that has not finished by then is a failure, not a longer wait."""
START_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 180.0


EXPECT = f"rows {CSV_ROWS}"
"""What every question's program prints (`CSV_ROWS` rows were read)."""


class Responder:
    """The scripted model: run the program, then (after its result) answer without numbers.

    A program's result without `EXPECT` (the CSV unread, a traceback) is kept in
    `wrong`: the bench fails rather than time questions that did not do the work.
    """

    def __init__(self) -> None:
        self.wrong: list[str] = []

    def __call__(self, request: ScriptedRequest) -> Reply:
        """The next turn for `request`."""
        messages = request.body.get("messages") or [{}]
        if messages[-1].get("role") == "tool":
            content = str(messages[-1].get("content") or "")
            if EXPECT not in content:
                self.wrong.append(content[:300])
            return Reply(content="Done: the program ran.")
        arguments = json.dumps({"code": CODE})
        return Reply(tool_calls=(ScriptedCall(name="execute_python", arguments=arguments),))


@dataclass(kw_only=True)
class Sample:
    """One question, as one side saw it."""

    run_id: str
    seconds: float
    status: str
    received: list[int] = field(default_factory=list)
    """SSE ids received live (the HTTP side only)."""
    first_event_s: float | None = None
    """Seconds from asking to the first event received live (the HTTP side only)."""


class ServerProcess:
    """`sbx serve` in a child process (see the module docstring)."""

    def __init__(self, *, root: Path, policy: Path, image: str, llm_url: str,
                 workers: int = 1) -> None:
        self.root = root
        self.database = f"sqlite:///{root / 'data' / 'sbx.db'}"
        command = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()",
                   "serve", "--port", "0", "--database", self.database, "--data-dir",
                   str(root / "data"), "--policy", str(policy), "--image", image,
                   "--log-level", "warning", "--access-log", "off", "--grace", "30s",
                   *(["--workers", str(workers)] if workers != 1 else [])]
        env = {**os.environ, "OPENAI_BASE_URL": llm_url, "OPENAI_API_KEY": FAKE_KEY,
               "SBX_MODEL": MODEL}
        for name in ("SBX_AUDIT_LOG", "SBX_AUDIT_KEY", "SBX_DATABASE_URL", "OTEL_TRACES_EXPORTER"):
            env.pop(name, None)
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines: list[str] = []
        self._pids = {self.proc.pid}
        self._ready: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()
        self.url = self._wait_listening()

    @property
    def audit_log(self) -> Path:
        """The server's audit log (the data dir's default)."""
        return self.root / "data" / "audit.jsonl"

    @property
    def owners(self) -> set[str]:
        """The `sbx.owner` labels of the server's containers.

        Its process's, and any worker process's seen while it ran (`cpu_s` notes them).
        """
        return {f"{socket.gethostname()}:{pid}" for pid in self._pids}

    def cpu_s(self) -> float:
        """CPU seconds the server and its worker processes have used (`process_cpu_s`)."""
        self._pids.update(process_tree(self.proc.pid))
        return process_cpu_s(self.proc.pid)

    def _read(self) -> None:
        if self.proc.stderr is None:  # pragma: no cover - Popen was given PIPE
            return
        for line in self.proc.stderr:
            self.lines.append(line)
            if "listening on" in line:
                self._ready.put(line)
        self._ready.put(None)

    def _wait_listening(self) -> str:
        try:
            line = self._ready.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = None
        if line is None:
            self.proc.kill()
            self.proc.wait(EXIT_TIMEOUT_S)
            raise ServeBenchError("sbx serve did not start:\n" + "".join(self.lines[-20:]))
        return line.split("listening on ", 1)[1].split()[0]

    def stop(self) -> int:
        """SIGTERM, then its exit code (a clean drain is 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(EXIT_TIMEOUT_S)
        finally:
            self._pump.join(10)


def process_cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) a process has used: this one, or `pid` and those under it.

    Under it: every live process below `pid` and the ones it reaped (a server's
    worker processes; Linux `/proc`).
    """
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    ticks = 0
    for index, member in enumerate(process_tree(pid)):
        try:  # the root's reaped children too (a worker that exited)
            ticks += process_cpu_ticks(Path(f"/proc/{member}/stat"), reaped=index == 0)
        except OSError:
            continue  # exited since it was listed: its parent's reaped figures hold it
    return ticks / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """`pid` first, then every live process under it (from `/proc/<pid>/task/*/children`)."""
    found, queue = [pid], [pid]
    while queue:
        parent = queue.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                children = [int(child) for child in task.read_text().split()]
            except OSError:
                continue
            found += children
            queue += children
    return found


def host_busy_s() -> float:
    """CPU seconds every core of the host has been busy (not idle or waiting for I/O)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class Opening:
    """A barrier the conversations of a phase pass after their first answer; it notes the CPU.

    The first question of a conversation takes its sandbox (a warm container or
    one created on its path), so the host's CPU from the phase's start to the
    moment the last conversation has its first answer (`at`) is what opening
    the phase's conversations cost. Then, before anyone goes on, `calm` runs
    (the bench lets both pools build what replaces the containers taken), and
    the host's CPU and the clock are read again (`calm_at`, `calm_t`): the later
    questions that follow run with no container being built, the window the
    busy-cores target reads. Everyone waits for the slowest first answer there:
    a later question's latency does not include that wait (it is timed from its
    own asking). With `wait` false (more conversations than the host's caps hold
    at once: those holding a sandbox must go on, or the rest would queue for the
    cap in vain) nobody waits and nothing is noted.
    """

    def __init__(self, count: int, *, wait: bool = True,
                 calm: Callable[[], object] = lambda: None,
                 process: Callable[[], float] = lambda: 0.0) -> None:
        self.wait = wait
        self.at: float | None = None
        """The host's busy CPU seconds when the last conversation passed (if `wait`)."""
        self.calm_at: float | None = None
        """The host's busy CPU seconds once `calm` returned (if `wait`)."""
        self.calm_t: float | None = None
        """`time.perf_counter()` once `calm` returned (if `wait`)."""
        self.calm_process_s = 0.0
        """CPU seconds of the side's process (`process`) while `calm` ran: no question's."""
        self._calm = calm
        self._process = process
        self._barrier = threading.Barrier(count, action=self._mark, timeout=DEADLINE_S)

    def _mark(self) -> None:
        self.at, process = host_busy_s(), self._process()
        self._calm()
        self.calm_at, self.calm_t = host_busy_s(), time.perf_counter()
        self.calm_process_s = self._process() - process

    def passed(self) -> None:
        """Wait until every conversation of the phase has had its first answer (if `wait`)."""
        if self.wait:
            self._barrier.wait()

    def abort(self) -> None:
        """Release the others at once (a conversation failed: the phase fails)."""
        self._barrier.abort()


def run_concurrently(count: int, work: Callable[[int], list[Sample]],
                     opening: Opening) -> list[list[Sample]]:
    """`work(i)` for i in 0..count-1 on `count` threads at once; each result, in order."""
    start = threading.Barrier(count, timeout=60)

    def begin(index: int) -> list[Sample]:
        start.wait()
        try:
            return work(index)
        except BaseException:
            opening.abort()
            raise

    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="bench") as pool:
        futures = [pool.submit(begin, index) for index in range(count)]
        _, late = wait(futures, timeout=DEADLINE_S)
        if late:
            opening.abort()
            raise ServeBenchError(f"{len(late)} of {count} conversations had not finished "
                                  f"after {DEADLINE_S:g} s")
        failures = [error for error in (future.exception() for future in futures) if error]
        if failures:  # the cause, not the others' broken barrier it led to
            causes = [error for error in failures if not isinstance(error, BrokenBarrierError)]
            raise (causes or failures)[0]
        return [future.result() for future in futures]


def upload_over_http(server: ServerProcess, keys: list[str], csv: Path) -> list[str]:
    """The CSV uploaded as a dataset of each key, one after another: the datasets' ids."""
    ids = []
    for key in keys:
        with _client(server, key) as client, csv.open("rb") as handle:
            uploaded = client.post("/v1/datasets", files={"file": (csv.name, handle, "text/csv")})
            _expect(uploaded, 201)
            ids.append(str(uploaded.json()["id"]))
    return ids


def open_over_http(server: ServerProcess, keys: list[str], datasets: list[str]) -> list[str]:
    """One new conversation per key over its dataset, one after another (an announced burst)."""
    ids = []
    for key, dataset in zip(keys, datasets, strict=True):
        with _client(server, key) as client:
            ids.append(_create_conversation(client, dataset))
    return ids


def http_phase(clients: list[httpx2.Client], datasets: list[str], questions: int,
               opening: Opening, opened: list[str] | None = None) -> list[list[Sample]]:
    """Each client (one API key each) holds a conversation and asks `questions`, all at once.

    `clients`: made before the phase (`clients_of`): an HTTP client's construction loads
    its TLS trust store, about 18 ms of CPU, and 32 of them made at the burst's start took
    about 0.6 s of the host's two cores from the server while its first events were
    timed; analysts' clients run on their own machines. `opened`: the conversations,
    already created (`open_over_http`), one per client; None creates each as its thread
    starts.
    """

    def conversation(index: int) -> list[Sample]:
        client = clients[index]
        conversation_id = (opened[index] if opened
                           else _create_conversation(client, datasets[index]))
        samples = [_ask_over_http(client, conversation_id, 1)]
        opening.passed()
        samples += [_ask_over_http(client, conversation_id, number)
                    for number in range(2, questions + 1)]
        _expect(client.delete(f"/v1/conversations/{conversation_id}"), 204)
        return samples

    return run_concurrently(len(clients), conversation, opening)


def clients_of(server: ServerProcess, keys: list[str]) -> list[httpx2.Client]:
    """One HTTP client per key, for `http_phase` (the caller closes them)."""
    return [_client(server, key) for key in keys]


def _client(server: ServerProcess, key: str) -> httpx2.Client:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx2.Client(base_url=server.url, headers=headers,
                         timeout=httpx2.Timeout(300.0, connect=10.0))


def _create_conversation(client: httpx2.Client, dataset: str) -> str:
    created = client.post("/v1/conversations", json={"datasets": [dataset]})
    _expect(created, 201)
    return str(created.json()["id"])


def _ask_over_http(client: httpx2.Client, conversation_id: str, number: int) -> Sample:
    started = time.perf_counter()
    asked = client.post(f"/v1/conversations/{conversation_id}/questions",
                        json={"question": f"Question {number}: run the program."})
    _expect(asked, 202)
    run_id = str(asked.json()["run_id"])
    received: list[int] = []
    status = "?"
    first_event: float | None = None
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        _expect(response, 200)
        for line in response.iter_lines():
            if line.startswith("id: "):
                received.append(int(line[4:]))
            elif line.startswith("data: "):
                if first_event is None:
                    first_event = time.perf_counter() - started
                event: dict[str, Any] = json.loads(line[6:])
                if event.get("type") in ("run_end", "run_error"):
                    status = str(event.get("status", "error"))
    return Sample(run_id=run_id, seconds=time.perf_counter() - started, status=status,
                  received=received, first_event_s=first_event)


def _expect(response: httpx2.Response, status: int) -> None:
    if response.status_code != status:
        body = response.read()[:300].decode("utf-8", "replace")
        raise ServeBenchError(f"{response.request.method} {response.request.url.path}: "
                              f"{response.status_code} (expected {status}): {body}")


def core_phase(app: App, endpoint: Endpoint, root: Path, csv: Path, count: int, questions: int,
               opening: Opening) -> list[list[Sample]]:
    """The same conversations through the application core, in this process, all at once."""

    def conversation(index: int) -> list[Sample]:
        spec = ConversationSpec(principal=f"bench:{index}", data=(csv,),
                                output_root=root / "output")
        transcript = root / "transcripts" / f"{index}-{time.monotonic_ns()}.jsonl"
        samples = []
        with app.conversation(spec, endpoint=endpoint, transcript=transcript) as talk:
            for number in range(1, questions + 1):
                started = time.perf_counter()
                result = talk.ask(f"Question {number}: run the program.")
                samples.append(Sample(run_id=result.run_id, status=result.status,
                                      seconds=time.perf_counter() - started))
                if number == 1:
                    opening.passed()
        return samples

    return run_concurrently(count, conversation, opening)
