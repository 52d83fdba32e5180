"""The in-container runner: a supervisor that owns the protocol, a zygote, and kernels.

It ships inside the sandbox image and imports nothing but the standard library.

Three kinds of process, so that model-written code can never speak the protocol:

* The **supervisor** (this file, no arguments) reads one JSON request per line
  on stdin and writes JSON frames, one per line, on stdout: that stream is the
  Docker attach socket the host holds. It enforces the execution timeout, caps
  stdout and stderr (head and tail), streams the head to the host while the
  code runs (`output` frames: none in the first OUTPUT_FIRST_DELAY_S, then at
  most one per stream every OUTPUT_INTERVAL_S unless OUTPUT_CHUNK_BYTES wait),
  kills stray processes after each execution, reads the cgroup's CPU and
  memory figures, and lists `/output` for artifacts, within the byte and time
  budget the host sets.
* The **zygote** is forked from the supervisor before anything else and
  imports the modules listed in PREIMPORT_LIST (the image recipe's
  `images/preimport.txt`: numpy and pandas, what a first question needs), and
  in a restore-ready container the ones the host names in SBX_PREIMPORT_MORE, once
  per container. It then only forks kernels when the supervisor asks, so every
  kernel starts with the data stack already imported, and a reset (timeout,
  OOM kill) forks a fresh copy of that clean state: module attributes a
  previous kernel changed are gone with it. It never sees a request, code or
  output: it is asked for a kernel (its pid and pipes go back to the supervisor)
  or for a dead kernel's exit status.
* The **kernel** holds the user's variables between executions, like a
  notebook. Forked by the zygote (which reaps it when the supervisor asks),
  it drops every descriptor but its own four pipes: stdout and stderr to the
  supervisor, and a request and a reply pipe. When it dies (timeout, OOM kill,
  `os._exit`) the supervisor asks for a new one and the result says that
  state was reset.
  The first kernel runs an empty cell before the supervisor says `ready`, so
  a warm pooled container never makes its first execution wait for it.

Three users, so that code cannot reach the protocol through /proc or signals
(Linux, and gVisor, which does not honour non-dumpable, both check uids): the
container starts as root with four capabilities; init (PID 1, which holds the
attach stream's pipes too) stays root; the supervisor empties the bounding set
and drops itself at once to uid 999 keeping only CAP_KILL (kill strays) and
CAP_SETUID and CAP_SETGID (drop each kernel; take the code's effective uid
while it reads `/output`, so it never reads more than the code could); the
zygote is uid 999 too, non-dumpable, with CAP_SETUID and CAP_SETGID only (its
kernels need them to drop); each kernel becomes uid 1000 with no capability at
all before any code runs. Code can therefore neither open init's, the
supervisor's or the zygote's descriptors or memory nor stop, trace or signal
them (measured under both runtimes, also while the supervisor's effective uid
is the code's: its real and saved uids stay 999). In a sandbox (SBX_SANDBOX=1)
a supervisor that cannot do this refuses to start.

The host treats every frame from here as untrusted input anyway: the
container is the boundary, not this file.

Frames written to stdout (each a JSON object with a `type`):
    ready     {"type": "ready", "protocol": 3}
    output    {"type": "output", "id", "seq", "stream": "stdout" | "stderr", "data": str}
              the head of a stream while the code runs: `seq` counts the execution's
              output frames from 0; only whole UTF-8 characters; at most half the stream's
              cap in all (the head the result keeps), and none with `"stream": false`
    artifact  {"type": "artifact", "id", "name", "size", "data": base64}
    result    {"type": "result", "id", "exit_code", "error", "stdout", "stderr",
               "stdout_total", "stdout_dropped", "stderr_total", "stderr_dropped",
               "timed_out", "killed_signal", "oom_killed", "state_reset",
               "cpu_seconds", "peak_memory_bytes", "refused": [{"name", "reason"}] (at most
               MAX_REFUSED_LISTED), "refused_more": int (refusals not listed),
               "results": [{"bundle": {mime: data}, "main": bool, "data"?, "chart"?}] (at
               most MAX_RESULTS), "results_dropped": int, "execution_count": int | null}
              `stdout` and `stderr` hold what the output frames did not carry: the
              stream is the output frames' data followed by this text
    fatal     {"type": "fatal", "message"}   the supervisor could not serve a request
Request read from stdin:
    {"type": "exec", "id": int, "code": str, "timeout": float, "stdout_cap": int,
     "stderr_cap": int, "max_artifact_bytes": int, "max_artifacts": int,
     "copy_bytes": int (artifact bytes this execution may send), "copy_refusal": str
     (the reason given past it), "copy_seconds": float (after the request arrives, no
     new artifact is started: the host's deadline is absolute),
     "measure": bool (optional, default true: read the cgroup here too),
     "stream": bool (optional, default true: send output frames while the code runs),
     "display": bool (optional, default true: print a trailing expression's value as a
     notebook does; false for one-shot programs, whose stdout is exactly what they wrote),
     "print_values": bool (optional, default true: false keeps that value a result only)}

In every kernel `plt.show()` saves the open figures to /output/figure-N.png (under
Agg it would do nothing), and `savefig` to a PNG records the figure's titles and
axis labels as PNG text (`FigureHooks`), so the host can describe a chart.

A cell's rich results (`Results`) are made as a notebook makes them, by IPython's
display protocol (`DisplayFormatter`, imported in the kernel only): the trailing
expression's value (still printed too), every `display()`, and each figure shown
(by `plt.show()`, or left open and unsaved at the cell's end) as a PNG with its
structured chart (E2B's: type, title, labels, units, elements). A named namespace's
program (`sbx.agent.in_namespace`) counts its own executions through `_sbx_kernel`.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import ctypes
import functools
import gc
import importlib
import importlib.util
import io
import json
import linecache
import math
import os
import re
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from typing import Any

PROTOCOL = 3
OUTPUT_DIR = "/output"
FONT_CACHE = "/opt/sbx/matplotlib"
MALLOC_PRIME_BYTES = 16 << 20
"""The block `prime_malloc` takes and frees: pandas' columns of a few MiB then come from
the heap and are reused, not mapped and faulted in anew (at most 32 MiB, glibc's cap)."""
SHELL_PACKAGE = "IPython"
"""The package whose `__init__` the zygote skips when it imports its display protocol."""
PREIMPORT_LIST = "/opt/sbx/preimport.txt"
"""Modules the zygote imports for every kernel, one per line (images/preimport.txt)."""
MAX_PREIMPORTS = 64
PREIMPORT_MIN_MEMORY = 384 << 20
"""Below this memory limit nothing is preimported: the stack takes 80 MiB of an idle
container under runc and about 130 MiB under gVisor (sbx bench), too much of a small one."""
OUTPUT_CHUNK_BYTES = 64 * 1024
"""Most bytes of one output frame; this much waiting is sent without waiting for the interval."""
OUTPUT_INTERVAL_S = 0.02
"""Least time between two output frames of one stream (unless a whole chunk is waiting): a
program printing a byte at a time costs the host 50 frames a second, not one per write."""
OUTPUT_FIRST_DELAY_S = 0.002
"""No output frame before this long after the request (unless a whole chunk waits): a quick
cell's output then comes with its result, one frame instead of two (a session `print(1)`
was 0.1 ms slower streamed, measured), and a long one's first chunk is at most this late."""
MAX_REPLY_BYTES = 6 << 20
"""A kernel's reply: its error and its results (at most MAX_RESULTS_BYTES) with room to spare."""
MAX_ERROR_CHARS = 16_000
MAX_ARTIFACT_DEPTH = 8
_LENGTH = struct.Struct(">I")
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_SET_NAME = 15
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAPABILITY_VERSION_3 = 0x20080522
CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7
RUNNER_CAPS = (1 << CAP_KILL) | (1 << CAP_SETGID) | (1 << CAP_SETUID)
"""What the supervisor keeps: kill strays, drop kernels (and itself, briefly) to the code's uid."""
ZYGOTE_CAPS = (1 << CAP_SETGID) | (1 << CAP_SETUID)
"""What the zygote keeps: its kernels drop to the code's uid with these, then hold nothing."""
RUNNER_UID = 999
CODE_UID = 1000
MAX_REFUSED_LISTED = 20
"""Refusals listed in one result frame; the rest are only counted (`refused_more`)."""
MAX_REFUSED_NAME = 240


# ---------------------------------------------------------------- framing helpers


def write_frame(fd: int, frame: dict[str, Any]) -> None:
    """Write one JSON line to `fd` completely (pipes and sockets may take it in parts)."""
    data = memoryview((json.dumps(frame, separators=(",", ":")) + "\n").encode())
    while data:
        written = os.write(fd, data)
        data = data[written:]


def send_message(fd: int, message: dict[str, Any]) -> None:
    """Send a length-prefixed JSON message on a kernel control pipe."""
    payload = json.dumps(message).encode()
    data = memoryview(_LENGTH.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


def read_exact(fd: int, size: int) -> bytes | None:
    """Read exactly `size` bytes, or None at end of file."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def receive_message(fd: int) -> dict[str, Any] | None:
    """Read one length-prefixed JSON message; None when the pipe closed or it is malformed."""
    header = read_exact(fd, _LENGTH.size)
    if header is None:
        return None
    (size,) = _LENGTH.unpack(header)
    if size > MAX_REPLY_BYTES:
        return None
    payload = read_exact(fd, size)
    if payload is None:
        return None
    try:
        message = json.loads(payload)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


# ---------------------------------------------------------------- identities


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def set_capabilities(mask: int) -> None:
    """Make `mask` this thread's effective and permitted sets, and inherit nothing (capset(2))."""
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for index in (0, 1):
        word = (mask >> (32 * index)) & 0xFFFFFFFF
        data[index].effective = data[index].permitted = word
        data[index].inheritable = 0
    if _libc().capset(ctypes.byref(header), data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capset: {os.strerror(errno)}")


def _prctl_checked(option: int, value: int, extra: int = 0) -> None:
    """prctl(2) that raises on failure."""
    args = [ctypes.c_ulong(option), ctypes.c_ulong(value), ctypes.c_ulong(extra)]
    if _libc().prctl(*args, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def own_status() -> dict[str, str]:
    """This process's uids and capability sets from /proc/self/status."""
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle if ":" in line)
    return {key: fields.get(key, "").strip() for key in ("Uid", "CapEff", "CapPrm", "CapBnd")}


def become(uid: int, capabilities: int) -> None:
    """Take `uid` (and gid, no supplementary groups) keeping exactly `capabilities`; verify it.

    Keep-caps carries the permitted set across the uid change, then capset
    trims it to `capabilities`. Raises OSError if the result is not what was
    asked: code must never run with more than it should.
    """
    _prctl_checked(PR_SET_KEEPCAPS, 1)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    set_capabilities(capabilities)
    _prctl_checked(PR_SET_KEEPCAPS, 0)
    status = own_status()
    wanted = f"{capabilities:016x}"
    held = {status["CapEff"], status["CapPrm"]}
    if status["Uid"].split() != [str(uid)] * 4 or held != {wanted} or int(status["CapBnd"], 16):
        raise OSError(1, f"became {status}, not uid {uid} with capabilities {wanted} only")


def empty_bounding_set() -> None:
    """Drop every capability from the bounding set (and the ambient set) for us and our children.

    A capability the kernel does not know answers EINVAL (gVisor knows fewer
    than Linux); anything else is an error.
    """
    for capability in range(64):
        try:
            _prctl_checked(PR_CAPBSET_DROP, capability)
        except OSError as exc:
            if exc.errno != 22:
                raise
    try:
        _prctl_checked(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError as exc:
        if exc.errno != 22:  # gVisor has no ambient set
            raise


@contextlib.contextmanager
def code_identity(separated: bool) -> Iterator[None]:
    """Take the code's effective uid and gid for file access while reading `/output`.

    `/output` belongs to the code, so the supervisor reads it as the code would:
    a path the code swaps for a symlink mid-copy can open nothing the code
    could not open itself (a capability such as DAC_READ_SEARCH would read
    anything). Real and saved uids stay ours, so code still cannot signal or
    trace us meanwhile; leaving restores both ids and checks it did.
    """
    if not separated:
        yield
        return
    os.setresgid(-1, CODE_UID, -1)
    os.setresuid(-1, CODE_UID, -1)
    try:
        yield
    finally:
        os.setresuid(-1, RUNNER_UID, -1)
        os.setresgid(-1, RUNNER_UID, -1)
        if os.geteuid() != RUNNER_UID or os.getegid() != RUNNER_UID:
            raise OSError(1, "could not return to the runner's own uid after reading /output")


def separate_privileges() -> bool:
    """Started as root: become RUNNER_UID with RUNNER_CAPS only; True when kernels must drop too.

    Outside a sandbox, started as an ordinary user (a developer running this
    file), there is nothing to separate and False is returned; inside one
    (SBX_SANDBOX=1) that is refused, since code would share our uid.
    """
    if os.geteuid() != 0:
        if os.environ.get("SBX_SANDBOX") == "1":
            raise PermissionError(
                "the runner must start as root (container user 0:0) to run code under "
                f"uid {CODE_UID} apart from its own uid {RUNNER_UID}"
            )
        return False
    empty_bounding_set()
    become(RUNNER_UID, RUNNER_CAPS)
    return True


# ---------------------------------------------------------------- the kernel


def kernel_main(request_fd: int, reply_fd: int) -> None:
    """Run requests from the supervisor in one persistent namespace until the pipe closes."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # the OOM killer takes the kernel, never the supervisor
    except OSError:
        pass
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    install_display()
    install_import_patches()
    while True:
        request = receive_message(request_fd)
        if request is None:
            return
        shows = request.get("display", True) is True
        RESULTS.start()
        reply = execute_cell(str(request["code"]), int(request["id"]), namespace, shows,
                             printed=request.get("print_values", True) is True)
        if shows:
            show_open_figures()
            if RESULTS.execution_count is None and int(request["id"]) != 0:
                RESULTS.count_cell()  # a named namespace's program counted its own
        reply.update(RESULTS.take())
        sys.stdout.flush()
        sys.stderr.flush()
        send_message(reply_fd, reply)


def execute_cell(
    code: str, cell_id: int, namespace: dict[str, Any], display: bool = True,
    printed: bool = True,
) -> dict[str, Any]:
    """Execute one program; with `display`, show a trailing expression's value as a notebook does.

    Without it (a one-shot program, `sbx exec`) stdout is exactly what the program wrote.
    `printed=False` keeps the value a result only, as a notebook's stdout never holds it
    (E2B's `run_code`); sbx's own agent reads it printed, beside its other output.
    """
    filename = f"<cell-{cell_id}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename=filename)
        trailing = None
        if display and tree.body and isinstance(tree.body[-1], ast.Expr):
            trailing = ast.Expression(tree.body.pop().value)  # type: ignore[attr-defined]
        exec(compile(tree, filename, "exec"), namespace)
        if trailing is not None:
            value = eval(compile(trailing, filename, "eval"), namespace)
            if value is not None:
                text = shown_value(value)
                if printed:
                    print(text)
                RESULTS.show(value, main=True, text=text)
    except SystemExit as stop:
        return {"exit_code": exit_code_of(stop), "error": None}
    except BaseException as exc:
        return {"exit_code": 1, "error": describe_error(exc)}
    return {"exit_code": 0, "error": None}


def shown_value(value: Any) -> str:
    """A trailing value's repr; a DataFrame or Series is summarised (head, tail, shape)."""
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series)):
        options = ("display.max_rows", 20, "display.min_rows", 10, "display.max_columns", 20,
                   "display.width", 120, "display.max_colwidth", 60)
        with pandas.option_context(*options):
            return repr(value)
    return repr(value)


# ---------------------------------------------------------------- rich results (display protocol)

RESULT_MIME_TYPES = (
    "text/plain", "text/html", "text/markdown", "image/svg+xml", "image/png", "image/jpeg",
    "application/pdf", "text/latex", "application/json",
)
"""The formats a result may carry, as IPython's display protocol names them."""
MAX_RESULTS = 32
"""Results one cell returns; more are only counted (`results_dropped`)."""
MAX_RESULTS_BYTES = 4 << 20
"""JSON bytes of all results of one cell (a figure's PNG is base64 inside them)."""
MAX_RESULT_TEXT = 100_000
"""Characters of one textual format; a longer one is left out (text/plain is cut instead)."""
MAX_DATA_ROWS = 100
MAX_DATA_COLUMNS = 50
MAX_DATA_CELL = 200
"""A DataFrame's `data`: its first rows and columns, each cell at most this many characters."""
MAX_CHART_ELEMENTS = 100
MAX_CHART_POINTS = 1000
MAX_CHART_TEXT = 200
"""A chart's elements, points per element, and characters per label or title."""


class Results:
    """The rich results of the cell running now: display() calls, figures, the trailing value.

    Each is a MIME bundle made by IPython's `DisplayFormatter` (the code's own
    `_repr_*_` methods included), with `data` for a DataFrame and `chart` for a
    matplotlib figure. Every size is bounded here; the host bounds them again, as
    everything from the code is hostile.
    """

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.size = 0
        self.dropped = 0
        self.count = 0
        self.namespace_counts: dict[str, int] = {}
        self.execution_count: int | None = None
        self._formatter: Any = None

    def start(self) -> None:
        """A new cell: no results yet."""
        self.items, self.size, self.dropped, self.execution_count = [], 0, 0, None

    def take(self) -> dict[str, Any]:
        """The reply's fields for this cell."""
        return {"results": self.items, "results_dropped": self.dropped,
                "execution_count": self.execution_count}

    def count_cell(self, namespace: str | None = None) -> int:
        """The cell's execution count: the kernel's, or one of a named namespace's own."""
        if namespace is None:
            self.count += 1
            self.execution_count = self.count
        else:
            number = self.namespace_counts.get(namespace, 0) + 1
            self.namespace_counts[namespace] = number
            self.execution_count = number
        return self.execution_count

    def formatter(self) -> Any:
        """IPython's DisplayFormatter, or None where IPython is not installed."""
        if self._formatter is None:
            try:
                formatters = importlib.import_module("IPython.core.formatters")
            except Exception:
                return None
            self._formatter = formatters.DisplayFormatter()
        return self._formatter

    def show(self, value: Any, main: bool = False, include: Any = None,
             exclude: Any = None, text: str | None = None) -> None:
        """Format `value` through the display protocol and keep it as a result.

        The main result's text/plain is the value as the cell printed it (`text`, or
        `shown_value` again): a DataFrame summarised, whatever the display options.
        """
        formatter = self.formatter()
        bundle: dict[str, Any] = {}
        if formatter is not None:
            try:
                bundle = dict(formatter.format(value, include=include, exclude=exclude)[0])
            except Exception as exc:
                bundle = {"text/plain": f"<display failed: {type(exc).__name__}>"}
        if main or "text/plain" not in bundle:
            bundle["text/plain"] = text if text is not None else shown_value(value)
        self.add(bundle, main=main, data=table_data(value))

    def add(self, bundle: dict[str, Any], *, main: bool = False, data: Any = None,
            chart: Any = None) -> None:
        """Keep one bounded result, or count it when the cell has had its share."""
        item: dict[str, Any] = {"bundle": bounded_bundle(bundle), "main": main}
        if data is not None:
            item["data"] = data
        if chart is not None:
            item["chart"] = chart
        try:
            size = len(json.dumps(item))
        except (TypeError, ValueError):
            item = {"bundle": {"text/plain": "<a result that is not JSON>"}, "main": main}
            size = len(json.dumps(item))
        room = MAX_RESULTS if main else MAX_RESULTS - 1  # the trailing value always fits
        if len(self.items) >= room or self.size + size > MAX_RESULTS_BYTES:
            self.dropped += 1
            return
        self.items.append(item)
        self.size += size


RESULTS = Results()


def display(*values: Any, include: Any = None, exclude: Any = None, raw: bool = False,
            **_ignored: Any) -> None:
    """IPython's `display()` for this kernel: each value becomes a result of the cell."""
    for value in values:
        if raw and isinstance(value, dict):
            RESULTS.add(value)
        else:
            RESULTS.show(value, include=include, exclude=exclude)


def install_display() -> None:
    """`display` as a builtin (as in a notebook) and in the kernel's `_sbx_kernel`.

    IPython's own `display` is replaced when its modules are imported (`ImportPatches`),
    so a kernel imports nothing of IPython before its code does.
    """
    setattr(builtins, "display", display)  # noqa: B010 (a builtin the code may call)
    kernel = type(sys)("_sbx_kernel")
    setattr(kernel, "show", RESULTS.show)  # noqa: B010
    setattr(kernel, "count_cell", RESULTS.count_cell)  # noqa: B010
    sys.modules["_sbx_kernel"] = kernel


def bounded_bundle(bundle: dict[str, Any]) -> dict[str, Any]:
    """The known formats of a bundle, each within its size (text/plain cut, others left out)."""
    kept: dict[str, Any] = {}
    for mime in RESULT_MIME_TYPES:
        value = bundle.get(mime)
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        if mime == "application/json":
            if isinstance(value, (dict, list)):
                kept[mime] = value
            continue
        if not isinstance(value, str):
            continue
        if len(value) <= MAX_RESULT_TEXT or mime in ("image/png", "image/jpeg", "application/pdf"):
            kept[mime] = value
        elif mime == "text/plain":
            kept[mime] = value[:MAX_RESULT_TEXT] + "..."
    return kept


def table_data(value: Any) -> dict[str, list[Any]] | None:
    """A DataFrame's first rows as `{column: [values]}` (JSON values only), else None."""
    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(value, pandas.DataFrame):
        return None
    try:
        head = value.iloc[:MAX_DATA_ROWS, :MAX_DATA_COLUMNS]
        data: dict[str, list[Any]] = {}
        for position in range(head.shape[1]):
            name = _short(str(head.columns[position]), MAX_DATA_CELL)
            column = head.iloc[:, position].tolist()
            data.setdefault(name, [json_value(cell) for cell in column])
        return data
    except Exception:
        return None


def json_value(value: Any) -> Any:
    """A value as JSON can carry it: finite numbers, booleans, null, else short text."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        with contextlib.suppress(Exception):
            value = value.item()  # a NumPy scalar: its Python number
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "isoformat"):
        try:
            return _short(value.isoformat(), MAX_DATA_CELL)
        except Exception:
            pass
    try:
        return _short(str(value), MAX_DATA_CELL)
    except Exception:
        return "<unprintable>"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- charts (a figure's data)


def figure_chart(figure: Any) -> dict[str, Any] | None:
    """E2B's structured chart of a drawn figure: one axes' chart, or a superchart of several."""
    try:
        axes = figure.get_axes()
        if not axes:
            return None
        if len(axes) == 1:
            return axes_chart(axes[0])
        suptitle = figure._suptitle.get_text() if figure._suptitle is not None else ""
        return {"type": "superchart", "title": _short(suptitle, MAX_CHART_TEXT) or None,
                "elements": [axes_chart(ax) for ax in axes[:12]]}
    except Exception as exc:  # a figure we cannot read is shown, only without its data
        report(f"chart not read: {type(exc).__name__}")
        return None


def chart_kind(ax: Any) -> str:
    """What one axes draws, judged by its artists (texts and grid lines aside)."""
    patches = importlib.import_module("matplotlib.patches")
    Text = importlib.import_module("matplotlib.text").Text
    Line2D = importlib.import_module("matplotlib.lines").Line2D
    PathCollection = importlib.import_module("matplotlib.collections").PathCollection
    PathPatch, Rectangle, Wedge = patches.PathPatch, patches.Rectangle, patches.Wedge

    artists = [a for a in getattr(ax, "_children", []) if not isinstance(a, Text)]
    if artists and all(isinstance(a, Line2D) for a in artists):
        return "box_and_whisker" if box_outlines(ax) else "line"
    if artists and all(isinstance(a, (PathPatch, Line2D)) for a in artists):
        return "box_and_whisker"
    for kind, types in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
        if artists and all(isinstance(a, types) for a in artists):
            return kind
    return "unknown"


def axes_chart(ax: Any) -> dict[str, Any]:
    """One axes as E2B's chart: type, title, labels and units, and its elements, bounded."""
    kind = chart_kind(ax)
    chart: dict[str, Any] = {"type": kind, "title": _short(ax.get_title(), MAX_CHART_TEXT) or None,
                             "elements": []}
    if kind != "pie":
        for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
            label = _short(label, MAX_CHART_TEXT) or None
            unit = re.search(r"\s\((.*?)\)|\[(.*?)\]", label or "")
            chart[f"{axis}_label"] = label
            chart[f"{axis}_unit"] = (unit.group(1) or unit.group(2)) if unit else None
    elements = {"line": line_elements, "scatter": scatter_elements, "bar": bar_elements,
                "pie": pie_elements, "box_and_whisker": box_elements}.get(kind)
    if elements is not None:
        chart["elements"] = elements(ax)[:MAX_CHART_ELEMENTS]
    if kind in ("line", "scatter"):
        for axis in ("x", "y"):
            ticks = getattr(ax, f"get_{axis}ticks")()[:MAX_CHART_ELEMENTS]
            chart[f"{axis}_ticks"] = [json_value(float(t)) for t in ticks]
            chart[f"{axis}_tick_labels"] = [
                _short(t.get_text(), MAX_CHART_TEXT)
                for t in getattr(ax, f"get_{axis}ticklabels")()[:MAX_CHART_ELEMENTS]]
            chart[f"{axis}_scale"] = str(getattr(ax, f"get_{axis}scale")())
    return chart


def _label(artist: Any, fallback: str) -> str:
    label = str(artist.get_label() or "")
    return fallback if not label or label.startswith("_") else _short(label, MAX_CHART_TEXT)


def _points(xs: Any, ys: Any) -> list[list[Any]]:
    xs, ys = list(xs)[:MAX_CHART_POINTS], list(ys)[:MAX_CHART_POINTS]
    return [[json_value(x), json_value(y)] for x, y in zip(xs, ys, strict=False)]


def line_elements(ax: Any) -> list[dict[str, Any]]:
    """Each line's label and points."""
    return [{"label": _label(line, f"Line {n}"), "points": _points(line.get_xdata(),
                                                                    line.get_ydata())}
            for n, line in enumerate(ax.get_lines()[:MAX_CHART_ELEMENTS])]


def scatter_elements(ax: Any) -> list[dict[str, Any]]:
    """Each point collection's label and points."""
    elements = []
    for n, collection in enumerate(ax.collections[:MAX_CHART_ELEMENTS]):
        offsets = collection.get_offsets()[:MAX_CHART_POINTS]
        elements.append({"label": _label(collection, f"Series {n}"),
                         "points": _points([p[0] for p in offsets], [p[1] for p in offsets])})
    return elements


def tick_label(labels: dict[float, str], position: float) -> str:
    """The tick label at `position`, or the position itself when no tick is there."""
    for tick, text in labels.items():
        if abs(tick - position) < 1e-6:
            return text
    return f"{position:g}"


def bar_elements(ax: Any) -> list[dict[str, Any]]:
    """Each bar: its category (the tick under it), its group (container) and its value."""
    elements: list[dict[str, Any]] = []
    for n, container in enumerate(ax.containers[:MAX_CHART_ELEMENTS]):
        group = _label(container, f"Group {n}")
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        ticks = ax.get_yticklabels() if horizontal else ax.get_xticklabels()
        labels = {float(t.get_position()[1 if horizontal else 0]): t.get_text() for t in ticks}
        for rect in list(container)[:MAX_CHART_ELEMENTS]:
            if horizontal:
                where, value = rect.get_y() + rect.get_height() / 2, rect.get_width()
            else:
                where, value = rect.get_x() + rect.get_width() / 2, rect.get_height()
            elements.append({"label": _short(tick_label(labels, where), MAX_CHART_TEXT),
                             "group": group, "value": json_value(float(value))})
    return elements


def pie_elements(ax: Any) -> list[dict[str, Any]]:
    """Each slice's label, angle in degrees and radius."""
    return [{"label": _label(wedge, f"Slice {n}"),
             "angle": json_value(round(abs(wedge.theta2 - wedge.theta1), 4)),
             "radius": json_value(float(wedge.r))}
            for n, wedge in enumerate(ax.patches[:MAX_CHART_ELEMENTS])]


def box_outlines(ax: Any) -> list[tuple[float, float, float, float]]:
    """Each box of a vertical box plot as (left, right, first quartile, third quartile)."""
    boxes = []
    for patch in ax.patches:  # patch_artist=True
        vertices = patch.get_path().vertices
        boxes.append((min(vertices[:, 0]), max(vertices[:, 0]),
                      min(vertices[:, 1]), max(vertices[:, 1])))
    if not boxes:  # drawn as closed five-point lines
        for line in ax.get_lines():
            xs, ys = list(line.get_xdata()), list(line.get_ydata())
            if len(xs) == 5 and xs[0] == xs[-1] and ys[0] == ys[-1] and len(set(xs)) == 2:
                boxes.append((min(xs), max(xs), min(ys), max(ys)))
    return [tuple(float(v) for v in box) for box in boxes]  # type: ignore[misc]


def box_elements(ax: Any) -> list[dict[str, Any]]:
    """Each box's quartiles, median, whiskers and outliers, read from the lines around it."""
    labels = {float(t.get_position()[0]): t.get_text() for t in ax.get_xticklabels()}
    elements = []
    for left, right, low, high in box_outlines(ax)[:MAX_CHART_ELEMENTS]:
        box = {"label": _short(tick_label(labels, (left + right) / 2), MAX_CHART_TEXT),
               "min": low, "first_quartile": low, "median": None, "third_quartile": high,
               "max": high, "outliers": []}
        for line in ax.get_lines():
            xs = [float(x) for x in line.get_xdata()]
            ys = [float(y) for y in line.get_ydata()]
            if not xs or not all(left <= x <= right for x in xs):
                continue
            if len(ys) == 2 and ys[0] == ys[1] and low <= ys[0] <= high and xs[0] != xs[1]:
                box["median"] = ys[0]
            elif len(ys) == 2 and xs[0] == xs[1] and min(ys) == high:
                box["max"] = max(ys)
            elif len(ys) == 2 and xs[0] == xs[1] and max(ys) == low:
                box["min"] = min(ys)
            elif line.get_linestyle() in ("None", "none", "", " "):
                box["outliers"] = [json_value(y) for y in ys[:MAX_CHART_POINTS]]
        elements.append(box)
    return elements


# ---------------------------------------------------------------- figures (plt.show)

FIGURE_NAME = "figure-{}.png"
"""`plt.show()` saves each open figure to /output under the first free name of this form."""
FIGURE_MAX_PIXELS = 1600
"""A shown figure is saved at a dpi that keeps its longer side at most this many pixels."""
FIGURE_META_KEY = "sbx:figure"
"""PNG text key under which a saved figure's titles and labels go (the host describes it)."""
MAX_FIGURE_META = 2000


class ImportPatches:
    """A meta-path finder that patches a module of `IMPORT_PATCHES` once it is imported.

    matplotlib: under Agg, `plt.show()` does nothing (a warning); here it saves the
    open figures to /output as artifacts, as a notebook shows them. `savefig` to a
    PNG adds the figure's titles and axis labels as PNG text, so the host can
    describe a chart to a model that cannot see images. IPython: its `display` is
    the kernel's, so what the code displays becomes a result of the cell. Nothing is
    imported for it: a kernel pays for a library only when its code imports it. The
    code may undo this: it only serves the code.
    """

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        """The spec the next finder gives, its loader patching the module once it ran."""
        patch = IMPORT_PATCHES.get(name)
        if patch is None:
            return None

        def exec_module(original: Callable[[Any], None], module: Any) -> None:
            original(module)
            patch(module)

        return wrapped_spec(self, name, path, target, exec_module)


def wrapped_spec(finder: Any, name: str, path: Any, target: Any,
                 exec_module: Callable[[Callable[[Any], None], Any], None]) -> Any:
    """The spec the other finders give for `name`, with `exec_module` wrapped around its loader's.

    `exec_module(original, module)` runs instead of the loader's own; None when no
    finder has the module.
    """
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module = functools.partial(  # type: ignore[method-assign]
                exec_module, spec.loader.exec_module)
            return spec
    return None


class Deferred3D:
    """A meta-path finder that leaves matplotlib's 3-D projection until a figure asks for it.

    `matplotlib.projections` imports `mpl_toolkits.mplot3d` to register the
    `3d` projection, so every `import matplotlib.pyplot` paid for it (50-145 ms
    of CPU here) though few charts are 3-D. While `matplotlib.projections` runs,
    this finder refuses that import (matplotlib then registers the others and
    warns, which is silenced); afterwards the registry imports and registers
    `Axes3D` the first time `projection="3d"` is looked up. Importing
    `mpl_toolkits.mplot3d` directly is untouched.
    """

    deferring = False

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        """Refuse mplot3d inside `matplotlib.projections`; wrap that module's loader."""
        if name == "mpl_toolkits.mplot3d" and Deferred3D.deferring:
            raise ImportError("the 3-D projection is imported on first use")
        if name != "matplotlib.projections" or Deferred3D.deferring:
            return None

        def exec_module(original: Callable[[Any], None], module: Any) -> None:
            Deferred3D.deferring = True
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    original(module)
            finally:
                Deferred3D.deferring = False
            register_3d_on_use(module.projection_registry)

        return wrapped_spec(self, name, path, target, exec_module)


def register_3d_on_use(registry: Any) -> None:
    """Make `registry` import and register the 3-D projection when `3d` is first asked for."""
    original = registry.get_projection_class

    def get_projection_class(name: Any, *args: Any, **kwargs: Any) -> Any:
        if name == "3d" and "3d" not in registry.get_projection_names():
            registry.register(importlib.import_module("mpl_toolkits.mplot3d").Axes3D)
        return original(name, *args, **kwargs)

    registry.get_projection_class = get_projection_class


def defer_3d_projection() -> None:
    """Install `Deferred3D` once (the zygote before its imports, each kernel before its code)."""
    if not any(isinstance(finder, Deferred3D) for finder in sys.meta_path):
        sys.meta_path.insert(0, Deferred3D())


def install_import_patches() -> None:
    """Patch each module of `IMPORT_PATCHES` now if imported (the zygote's), else on import."""
    if not any(isinstance(finder, ImportPatches) for finder in sys.meta_path):
        sys.meta_path.insert(0, ImportPatches())
    defer_3d_projection()
    for name, patch in IMPORT_PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])


def patch_display(module: Any) -> None:
    """IPython's `display` is this kernel's (for `from IPython.display import display`)."""
    if hasattr(module, "display"):
        setattr(module, "display", display)  # noqa: B010


def patch_shell_package(package: Any) -> None:
    """Give IPython's package the submodules the zygote imported before it (`import_without_shell`).

    A submodule already in `sys.modules` is not set on a package imported after it,
    so without this `import IPython; IPython.core` would fail.
    """
    prefix = package.__name__ + "."
    for name, module in list(sys.modules.items()):
        child = name[len(prefix):] if name.startswith(prefix) else ""
        if child and "." not in child and not hasattr(package, child):
            setattr(package, child, module)


def patch_figures(module: Any) -> None:
    """`show` for pyplot, `savefig` for Figure (once each)."""
    try:
        if module.__name__ == "matplotlib.pyplot" and not hasattr(module.show, "_sbx"):
            module.show = _show_function(module)
        elif module.__name__ == "matplotlib.figure" and not hasattr(module.Figure.savefig, "_sbx"):
            module.Figure.savefig = _savefig_method(module.Figure.savefig)
    except Exception as exc:  # matplotlib changed: plots still work, only uncaptured
        report(f"could not patch {module.__name__}: {type(exc).__name__}")


IMPORT_PATCHES: dict[str, Callable[[Any], None]] = {
    "matplotlib.pyplot": patch_figures, "matplotlib.figure": patch_figures,
    "IPython.core.display_functions": patch_display, "IPython.display": patch_display,
    "IPython.core.display": patch_display, SHELL_PACKAGE: patch_shell_package,
}
"""The modules patched on import, each with what patches it (`ImportPatches`)."""


def _show_function(pyplot: Any) -> Callable[..., None]:
    @functools.wraps(pyplot.show)
    def show(*args: Any, **kwargs: Any) -> None:
        """Save every open figure to /output (figure-N.png), keep it as a result, close it."""
        for number in pyplot.get_fignums():
            show_figure(pyplot.figure(number))
        pyplot.close("all")

    show._sbx = True  # type: ignore[attr-defined]
    return show


def show_figure(figure: Any) -> None:
    """One figure as a notebook shows it: a PNG in /output and a result with its chart."""
    width, height = figure.get_size_inches()
    dpi = min(float(figure.dpi), FIGURE_MAX_PIXELS / max(width, height, 0.01))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)  # drawn now: its ticks are known
    png = buffer.getvalue()
    with open(free_figure_path(), "xb") as handle:
        handle.write(png)
    RESULTS.add({"text/plain": f"<Figure size {width * dpi:.0f}x{height * dpi:.0f} with "
                               f"{len(figure.get_axes())} Axes>", "image/png": png},
                chart=figure_chart(figure))


def show_open_figures() -> None:
    """At a cell's end, show the figures it left open and never saved (as a notebook does)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        for number in pyplot.get_fignums():
            figure = pyplot.figure(number)
            if not getattr(figure, "_sbx_saved", False):
                show_figure(figure)
                pyplot.close(figure)  # a saved one stays open for the next cell, as before
    except Exception as exc:  # the code broke pyplot: its figures stay unshown
        report(f"figures not shown: {type(exc).__name__}")


def free_figure_path() -> str:
    """The first /output/figure-N.png that does not exist yet."""
    number = 1
    while os.path.lexists(os.path.join(OUTPUT_DIR, FIGURE_NAME.format(number))):
        number += 1
    return os.path.join(OUTPUT_DIR, FIGURE_NAME.format(number))


def _savefig_method(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)  # pyplot checks the wrapped method's qualified name
    def savefig(self: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
        """Figure.savefig, with the titles and labels as PNG text when it writes a PNG."""
        if "metadata" not in kwargs and _writes_png(fname, kwargs.get("format")):
            kwargs["metadata"] = {FIGURE_META_KEY: describe_figure(self)}
        self._sbx_saved = True  # saved by the code: not shown again at the cell's end
        return original(self, fname, *args, **kwargs)

    savefig._sbx = True  # type: ignore[attr-defined]
    return savefig


def _writes_png(fname: Any, fmt: Any) -> bool:
    if fmt is not None:
        return str(fmt).lower() == "png"
    return isinstance(fname, (str, os.PathLike)) and os.fspath(fname).lower().endswith(".png")


def describe_figure(figure: Any) -> str:
    """JSON of the figure's suptitle and each axes' title, labels and artist counts."""
    try:
        suptitle = figure._suptitle.get_text() if figure._suptitle is not None else ""
        axes = [
            {
                "title": ax.get_title(),
                "xlabel": ax.get_xlabel(),
                "ylabel": ax.get_ylabel(),
                "lines": len(ax.lines),
                "patches": len(ax.patches),
                "collections": len(ax.collections),
                "images": len(ax.images),
            }
            for ax in figure.get_axes()[:12]
        ]
        text = json.dumps({"suptitle": suptitle, "axes": axes}, ensure_ascii=True)
    except Exception:
        return "{}"
    return text if len(text) <= MAX_FIGURE_META else "{}"


def exit_code_of(stop: SystemExit) -> int:
    """Map `sys.exit(x)` to an exit status the way the interpreter does."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def describe_error(exc: BaseException) -> dict[str, str]:
    """Type, message and a traceback without this file's frames."""
    summary = traceback.TracebackException.from_exception(exc)
    own_file = describe_error.__code__.co_filename  # runner.py, even when run from its .pyc
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if frame.filename != own_file]
    )
    try:
        message = str(exc)
    except Exception:
        message = "<exception str() failed>"
    text = "".join(summary.format())
    return {
        "type": type(exc).__name__[:200],
        "message": message[:MAX_ERROR_CHARS] + ("..." if len(message) > MAX_ERROR_CHARS else ""),
        "traceback": text if len(text) <= MAX_ERROR_CHARS else "...\n" + text[-MAX_ERROR_CHARS:],
    }


# ---------------------------------------------------------------- supervisor pieces


class Capture:
    """Keep the head and tail of a stream up to `cap` bytes and count the rest.

    The head may also stream to the host while the code runs (`LiveOutput`):
    `sent` head bytes went out in output frames, always whole UTF-8
    characters, and `render` then leaves them out of the result.
    """

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.sent = 0

    def feed(self, data: bytes) -> None:
        """Take a chunk, keeping memory bounded by the cap whatever the stream's size."""
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def streamable(self) -> int:
        """Head bytes not sent yet that end on a whole character (a split one waits)."""
        return whole_characters_end(self.head, self.sent, len(self.head)) - self.sent

    def take_stream(self, limit: int) -> bytes:
        """Up to `limit` head bytes not sent yet, ending on a whole character; marks them sent."""
        end = whole_characters_end(self.head, self.sent, min(len(self.head), self.sent + limit))
        data = bytes(self.head[self.sent : end])
        self.sent = end
        return data

    def render(self) -> tuple[str, int]:
        """The kept text not streamed (with a cut marker when truncated), and the bytes dropped."""
        tail = bytes(self.tail[-self.tail_cap :]) if self.tail_cap else b""
        dropped = self.total - len(self.head) - len(tail)
        head = bytes(self.head[self.sent :])
        if dropped <= 0:
            return (head + bytes(self.tail)).decode("utf-8", "replace"), 0
        marker = f"\n[... {dropped} bytes cut ...]\n".encode()
        return (head + marker + tail).decode("utf-8", "replace"), dropped


def whole_characters_end(data: bytearray, start: int, end: int) -> int:
    """The largest cut at or before `end` (not before `start`) that splits no UTF-8 character.

    Only a lead byte whose sequence is still incomplete at `end` moves the cut
    back (at most three bytes); invalid bytes are cut anywhere, and decode as
    U+FFFD on the host exactly as they would in one piece.
    """
    for back in range(1, min(4, end - start + 1)):
        byte = data[end - back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for its lead byte
        if byte >= 0xC0:
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return end - back if back < needed else end
        return end
    return end


class LiveOutput:
    """Send the head of stdout and stderr to the host while the code runs, as output frames.

    What was printed then reaches the host even when the container dies
    (gVisor kills a sandbox at its memory limit with everything in it). It
    stays within the caps: only the head streams (the result keeps the rest,
    as before), and at most one frame per stream per OUTPUT_INTERVAL_S unless
    a whole OUTPUT_CHUNK_BYTES waits, so the host can bound the frame count.
    """

    def __init__(self, request_id: int, out: Capture, err: Capture, enabled: bool) -> None:
        self.request_id = request_id
        self.out, self.err = out, err
        self.streams = (("stdout", out), ("stderr", err)) if enabled else ()
        self.seq = 0
        first = time.monotonic() + OUTPUT_FIRST_DELAY_S - OUTPUT_INTERVAL_S
        self.last = {"stdout": first, "stderr": first}
        """When each stream last sent a frame (as if one had gone just before the request)."""

    def wait(self, now: float) -> float:
        """Seconds until a waiting chunk may be sent (infinite when nothing waits)."""
        soonest = math.inf
        for name, capture in self.streams:
            if capture.streamable():
                soonest = min(soonest, max(0.0, self.last[name] + OUTPUT_INTERVAL_S - now))
        return soonest

    def send(self, now: float) -> None:
        """Send every chunk the rate allows now."""
        for name, capture in self.streams:
            while (waiting := capture.streamable()) > 0:
                if waiting < OUTPUT_CHUNK_BYTES and now - self.last[name] < OUTPUT_INTERVAL_S:
                    break
                data = capture.take_stream(OUTPUT_CHUNK_BYTES)
                if not data:
                    break
                frame = {"type": "output", "id": self.request_id, "seq": self.seq,
                         "stream": name, "data": data.decode("utf-8", "replace")}
                write_frame(1, frame)
                self.seq += 1
                self.last[name] = now


class Cgroup:
    """CPU and memory figures of this container's cgroup (v1 or v2), where readable.

    Each file is opened once and re-read with `pread` at offset 0: every
    execution reads several of them, and opening a cgroupfs file costs more
    than reading it (measured: about a third of the runner's time per request).
    """

    def __init__(self) -> None:
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        base = "/sys/fs/cgroup"
        paths = {
            "memory": "memory.current" if v2 else "memory/memory.usage_in_bytes",
            "peak": "memory.peak" if v2 else "memory/memory.max_usage_in_bytes",
            "oom": "memory.events" if v2 else "memory/memory.oom_control",
            "cpu": "cpu.stat" if v2 else "cpuacct/cpuacct.usage",
            "pids": "pids.current" if v2 else "pids/pids.current",
        }
        self.fds = {key: self._open(f"{base}/{path}") for key, path in paths.items()}
        self.v2 = v2

    @staticmethod
    def _open(path: str) -> int:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return -1

    def _read(self, key: str) -> str | None:
        fd = self.fds[key]
        if fd < 0:
            return None
        try:
            return os.pread(fd, 4096, 0).decode("ascii", "replace")
        except OSError:
            return None

    def _number(self, key: str) -> int | None:
        text = self._read(key)
        return int(text) if text and text.strip().isdigit() else None

    def memory(self) -> int | None:
        """Current memory use in bytes."""
        return self._number("memory")

    def peak(self) -> int | None:
        """High-water mark of memory use since the container started."""
        return self._number("peak")

    def tasks(self) -> int | None:
        """Processes plus threads in the container, where the pids controller is visible."""
        return self._number("pids")

    def oom_kills(self) -> int | None:
        """How many processes the OOM killer has killed in this cgroup."""
        for line in (self._read("oom") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None

    def cpu_seconds(self) -> float | None:
        """CPU time used by the whole container so far."""
        text = self._read("cpu")
        if text is None:
            return None
        if not self.v2:
            return int(text) / 1e9 if text.strip().isdigit() else None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec" and value.strip().isdigit():
                return int(value) / 1e6
        return None


class Unmeasured:
    """Stands in for `Cgroup` when the host reads the cgroup itself (request `measure: false`).

    The host's figures cannot be forged from in here, so measuring twice only
    costs time on every execution.
    """

    def memory(self) -> None:
        """Not measured."""

    def peak(self) -> None:
        """Not measured."""

    def oom_kills(self) -> None:
        """Not measured."""

    def cpu_seconds(self) -> None:
        """Not measured."""


UNMEASURED = Unmeasured()


def kill_strays(keep: set[int]) -> None:
    """SIGKILL every process in the container but init and `keep`: nothing outlives a run.

    `keep` is us, the zygote and a live kernel. Only inside a sandbox (the host
    sets SBX_SANDBOX=1): run by hand on a workstation, this would otherwise kill
    every process of the same user.
    """
    if os.environ.get("SBX_SANDBOX") != "1":
        return
    for _ in range(3):
        found = False
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in keep and int(entry) != 1:
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


ARTIFACT_NAME_BYTES = 255
"""Longest name of one entry of /output we send (the host's limit too)."""
ARTIFACT_PATH_BYTES = 4 * ARTIFACT_NAME_BYTES
"""Longest relative path of an artifact we send (the host's limit too)."""
MAX_LISTED_ENTRIES = 10_000
"""Entries of /output examined per execution; a flood of files is refused as a whole."""
SHOWN_NAME_CHARS = 120
"""Longest refused name reported, after escaping."""
UNSAFE_NAME_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
"""Controls (C0, DEL, C1), bidi and zero-width format characters, surrogates, private use,
line and paragraph separators: the host refuses them, and terminals obey them."""


PLAIN_NAME_BYTES = bytes(byte for byte in range(0x20, 0x7F) if byte != ord("\\"))
"""Printable ASCII but the backslash: a name made only of these needs no further check."""


def name_problem(raw: bytes) -> str | None:
    """Why an entry name of /output must not be sent to the host, or None.

    Names come from the code (or an archive it unpacked): any bytes but `/`
    and NUL. JSON cannot carry undecodable bytes, and the host refuses what
    a terminal or a shell would misread, so such entries are refused here,
    one by one, instead of breaking the frame that carries them.
    """
    if len(raw) > ARTIFACT_NAME_BYTES:
        return "name too long"
    if raw.startswith(b"."):
        return "hidden name (starts with a dot)"
    if not raw.translate(None, PLAIN_NAME_BYTES):
        return None  # printable ASCII only: the common case, without a per-character lookup
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "name is not valid UTF-8"
    if "\\" in text or any(unicodedata.category(ch) in UNSAFE_NAME_CATEGORIES for ch in text):
        return "name has control, invisible or backslash characters"
    return None


def shown_name(raw: bytes) -> str:
    """A refused name safe to report: undecodable bytes and non-printables escaped, bounded."""
    text = raw.decode("utf-8", "backslashreplace")
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    if len(shown) > SHOWN_NAME_CHARS:
        shown = shown[: SHOWN_NAME_CHARS - 1] + "\u2026"
    return shown


def scan_directory(path: bytes, budget: int) -> list[os.DirEntry[bytes]] | None:
    """Up to `budget` entries of one directory, sorted by name; None when it has more."""
    entries: list[os.DirEntry[bytes]] = []
    with os.scandir(path) as found:
        for entry in found:
            if len(entries) >= budget:
                return None
            entries.append(entry)
    return sorted(entries, key=lambda item: item.name)


def list_artifacts(
    root: str, limit_depth: int = MAX_ARTIFACT_DEPTH
) -> tuple[list[str], list[dict[str, str]]]:
    """Regular files under `root` (relative names) and refused entries; links never followed.

    Names are read as bytes and checked one by one (`name_problem`): a bad
    name is refused, and a directory with one is not entered.
    """
    files: list[str] = []
    refused: list[dict[str, str]] = []
    pending = [(b"", 0)]
    budget = MAX_LISTED_ENTRIES
    while pending:
        prefix, depth = pending.pop()
        try:
            entries = scan_directory(os.path.join(os.fsencode(root), prefix), budget)
        except OSError:
            continue
        if entries is None:
            where = shown_name(prefix.rstrip(b"/")) or "."
            refused.append({"name": where, "reason": f"over {MAX_LISTED_ENTRIES} entries"})
            return files, refused
        budget -= len(entries)
        for entry in entries:
            name = prefix + entry.name
            problem = name_problem(entry.name)
            if problem is None and len(name) > ARTIFACT_PATH_BYTES:
                problem = "path too long"
            if problem is not None:
                refused.append({"name": shown_name(name), "reason": problem})
            elif entry.is_symlink():
                refused.append({"name": name.decode(), "reason": "symlink"})
            elif entry.is_dir(follow_symlinks=False):
                if depth + 1 >= limit_depth:
                    refused.append({"name": name.decode(), "reason": "directory nested too deep"})
                else:
                    pending.append((name + b"/", depth + 1))
            elif entry.is_file(follow_symlinks=False):
                files.append(name.decode())
            else:
                refused.append({"name": name.decode(), "reason": "special file"})
    return files, refused


def read_regular_file(path: str | bytes, cap: int) -> bytes | None:
    """The file's bytes, or None when it is not a regular file or is larger than `cap`."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000) or info.st_size > cap:
            return None
        data = read_exact(fd, info.st_size) or b""
        return data if len(data) <= cap else None
    finally:
        os.close(fd)


class Kernel:
    """A kernel process that runs code; we hold the other ends of its four pipes.

    The zygote forked it and is its parent: the zygote reaps it when we ask
    (`reap` is `Zygote.reap`), and we kill it with CAP_KILL. Should the zygote
    have died, we fork kernels ourselves and `reap` is `reap_child`.
    """

    def __init__(
        self,
        reap: Callable[[int], int],
        pid: int,
        request_w: int,
        reply_r: int,
        stdout_r: int,
        stderr_r: int,
    ) -> None:
        self.reap = reap
        self.pid = pid
        self.request_w, self.reply_r = request_w, reply_r
        self.stdout_r, self.stderr_r = stdout_r, stderr_r
        self.returncode: int | None = None
        for fd in (self.stdout_r, self.stderr_r):
            os.set_blocking(fd, False)  # read after select; drain without blocking

    def outputs(self) -> tuple[int, int]:
        """The read ends of the kernel's stdout and stderr."""
        return self.stdout_r, self.stderr_r

    def kill(self) -> int | None:
        """Kill the kernel's process group and reap it; the killing signal or None.

        The output pipes stay open, so what the kernel wrote before it died can
        still be drained; `close_outputs()` releases them.
        """
        for fd in (self.request_w, self.reply_r):
            _close_quietly(fd)
        for kill in (os.killpg, os.kill):  # the group exists once the kernel called setsid
            with contextlib.suppress(OSError):
                kill(self.pid, signal.SIGKILL)
        if self.returncode is None:
            self.returncode = self.reap(self.pid)
        return -self.returncode if self.returncode < 0 else None

    def close_outputs(self) -> None:
        """Release the read ends of stdout and stderr (after a final drain)."""
        for fd in self.outputs():
            _close_quietly(fd)
        self.stdout_r = self.stderr_r = -1


class Zygote:
    """The supervisor's handle on the zygote: ask it for kernels and their exit status.

    One request at a time on a SEQPACKET socket pair: `k` forks a kernel (its
    pid comes back with our ends of its four pipes), `w<pid>` reaps one (its
    exit status comes back). The zygote is forked before the supervisor opens
    anything (cgroup files, the request buffer), so neither it nor its kernels
    inherit any of that. A zygote that died is started again once.
    """

    def __init__(self, separated: bool) -> None:
        self.separated = separated
        self.pid = -1
        self.control: socket.socket | None = None
        self.tasks = 1
        """Threads of the zygote (a library may start one), for the stray count."""

    def spawn(self) -> None:
        """Fork the zygote; it imports the stack while the supervisor goes on."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            zygote_main(theirs.detach(), self.separated)  # never returns
        theirs.close()
        self.pid, self.control = pid, ours

    def fork_kernel(self) -> Kernel:
        """A new kernel with the stack imported, or without it when the zygote has died.

        A dead zygote is not started again: its imports would now read files
        the code could have changed (the matplotlib cache in /tmp), in a process
        that holds capabilities. Kernels are then forked here, as before the
        zygote existed, and import the stack themselves.
        """
        if self.control is not None:
            try:
                kernel = self._request_kernel()
                self.tasks = thread_count(self.pid)
                return kernel
            except OSError as exc:
                self.stop()
                report(f"the zygote is gone ({exc}); kernels no longer start with the stack")
        pid, ends = spawn_kernel(self.separated)
        return Kernel(reap_child, pid, *ends)

    def _request_kernel(self) -> Kernel:
        control = self.control
        if control is None:
            raise OSError("the zygote is not running")
        control.sendall(b"k")
        message, fds, _, _ = socket.recv_fds(control, 64, 4)
        if len(fds) != 4 or not message.isdigit() or int(message) <= 1:
            for fd in fds:
                _close_quietly(fd)
            raise OSError(f"the zygote sent no kernel ({message[:40]!r})")
        return Kernel(self.reap, int(message), *fds)

    def reap(self, pid: int) -> int:
        """Wait for kernel `pid` to end (it was killed) and return its exit code (-N: signal N)."""
        control = self.control
        try:
            if control is None:
                raise OSError("the zygote is not running")
            control.sendall(b"w%d" % pid)
            return int(control.recv(64))
        except (OSError, ValueError):
            return -signal.SIGKILL  # the zygote died with it: the kernel is gone too

    def stop(self) -> None:
        """End the zygote and reap it (idempotent)."""
        control, self.control = self.control, None
        if control is not None:
            control.close()
        if self.pid > 0:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.pid, self.tasks = -1, 0


def reap_child(pid: int) -> int:
    """Wait for our own child `pid` to end; its exit code (-N: killed by signal N)."""
    try:
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        return -signal.SIGKILL


def report(message: str) -> None:
    """One line on the runner's own stderr (the host keeps its head for diagnostics)."""
    os.write(2, (f"sbx runner: {message}"[:300] + "\n").encode("utf-8", "replace"))


def thread_count(pid: int) -> int:
    """Threads of process `pid` (1 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 1


def zygote_main(control: int, separated: bool) -> None:
    """In the forked zygote: keep only the control socket, import the stack, fork kernels.

    Never returns. Descriptors 0 and 1 become /dev/null (only the supervisor
    writes frames), 2 stays (the runner's own stderr, for import failures), the
    control socket moves to 3 and everything else closes. The zygote keeps only
    the capabilities its kernels need to drop, and is made non-dumpable again
    after the imports (taking the code's effective uid for them resets it).
    """
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(control, 3, inheritable=False)
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
        if separated:
            set_capabilities(ZYGOTE_CAPS)
        set_process_name(b"sbx-zygote")
        preimport(read_preimport_list(PREIMPORT_LIST) + more_preimports(), separated)
        prime_malloc()
        _prctl_checked(PR_SET_DUMPABLE, 0)
        if _libc().prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(1, "the zygote is still dumpable")
        serve_kernels(socket.socket(fileno=3), separated)
        code = 0
    finally:
        os._exit(code)


def set_process_name(name: bytes) -> None:
    """Name this process in /proc/<pid>/comm (what `ps` shows); failures are ignored."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def read_preimport_list(path: str) -> list[str]:
    """Module names from the image's list: one per line, `#` comments; none when it is missing."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read(1 << 16).splitlines()
    except OSError:
        return []
    names = [line.split("#", 1)[0].strip() for line in lines]
    return [name for name in names if MODULE_NAME.fullmatch(name)][:MAX_PREIMPORTS]


def more_preimports() -> list[str]:
    """Modules the host asked for past the image's list (SBX_PREIMPORT_MORE, comma-separated).

    The restore-ready containers' libraries (scikit-learn, pyplot): module names
    only, at most MAX_PREIMPORTS; anything else in the variable is ignored.
    """
    names = os.environ.get("SBX_PREIMPORT_MORE", "")[: 1 << 12].split(",")
    return [name for name in names if MODULE_NAME.fullmatch(name)][:MAX_PREIMPORTS]


def preimport(names: list[str], separated: bool) -> None:
    """Import `names` as the code's user would, then freeze them out of the collector.

    As the code's effective uid, so what a library creates on import (the
    matplotlib config and font cache under /tmp) belongs to the code, as it
    did when each kernel imported for itself. Nothing when the container's
    memory is under PREIMPORT_MIN_MEMORY: the stack would take most of it.
    `gc.freeze` keeps the collector of every forked kernel from touching, and
    so copying, these objects; there is no collection before it (20 ms of CPU in
    every warm container, and the holes it leaves in the heap are what a kernel's
    later allocations fill, copying those pages: Python's `gc.freeze` guidance
    for a fork server). A module that fails to import is reported on
    stderr and skipped. Nothing unless the host asked (SBX_PREIMPORT=1).
    """
    limit = memory_limit()
    if limit is not None and limit < PREIMPORT_MIN_MEMORY:
        names = []
    if os.environ.get("SBX_PREIMPORT") != "1":  # only the warm pool's containers: the host
        names = []  # creates the others for a caller, who would wait for imports it may not use
    defer_3d_projection()
    with code_identity(separated):
        config = seed_font_cache()
        with writable_for_us(config):
            for name in names:
                try:
                    import_without_shell(name)
                except Exception as exc:
                    report(f"could not preimport {name}: {type(exc).__name__}: {exc}")
    gc.freeze()


def import_without_shell(name: str) -> None:
    """Import `name`; a module of IPython without running IPython's package `__init__`.

    That `__init__` imports IPython's interactive shell first (about 20 ms of CPU
    and 57 modules in every warm container, measured in this image), which the
    display protocol a kernel uses (`IPython.core.formatters`, `display_functions`)
    never needs: their own imports are relative, the shell's only inside the
    functions that use it. While such a module is imported, the package stands
    in `sys.modules` uninitialised, then is taken out again, so the code's own
    `import IPython` later runs the package's `__init__` as usual and
    `patch_shell_package` gives it the submodules imported before. Only in the
    zygote, before any code runs: nothing else can import the package meanwhile.
    """
    package = name.partition(".")[0]
    if package != SHELL_PACKAGE or package in sys.modules:
        importlib.import_module(name)
        return
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {package!r}", name=package)
    sys.modules[package] = importlib.util.module_from_spec(spec)
    try:
        importlib.import_module(name)
    finally:
        del sys.modules[package]


def prime_malloc() -> None:
    """Raise glibc's mmap threshold as a first large free would, before any kernel is forked.

    glibc serves an allocation above its mmap threshold (128 KiB at start) with
    a new mapping and unmaps it on free, and raises the threshold only when such
    a block is freed; until then every large array pandas makes and drops
    faults in fresh pages again. One MALLOC_PRIME_BYTES block taken and freed
    here (never touched, so no memory is kept) sets the threshold to its size
    and the trim threshold to twice that in the zygote, and every kernel forked
    from it inherits them. Measured with this image (pandas `read_csv` and a
    `groupby` of a 10 MB CSV in fresh processes, 5 each, medians): the first run
    97 ms against 123 ms, the second 70 against 104 ms, page faults 10.6k
    against 16.5k; a kernel may then keep up to twice the block of freed heap.
    """
    libc = _libc()
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(MALLOC_PRIME_BYTES))


@contextlib.contextmanager
def writable_for_us(directory: str | None) -> Iterator[None]:
    """Open the code's new matplotlib directory to us while we import, then close it again.

    matplotlib checks its directory with access(2), which asks about the real
    uid (ours, not the code's whose effective uid we hold): refused, it would
    build a font cache in a temporary directory instead (0.5 s, and a warning).
    No code runs yet, so nothing else can write there meanwhile.
    """
    if directory is None:
        yield
        return
    os.chmod(directory, 0o777)
    try:
        yield
    finally:
        os.chmod(directory, 0o755)


def memory_limit() -> int | None:
    """The container's memory limit in bytes: its cgroup's (runc) or the kernel's total (gVisor)."""
    found: list[int] = []
    for path in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
        with contextlib.suppress(OSError, ValueError), open(path) as handle:
            found.append(int(handle.read().strip()))
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                found.append(int(line.split()[1]) * 1024)
    return min(found) if found else None


def serve_kernels(control: socket.socket, separated: bool) -> None:
    """Answer the supervisor's requests (`k`: fork a kernel, `w<pid>`: reap one) until it goes."""
    while request := control.recv(64):
        if request == b"k":
            pid, ends = spawn_kernel(separated)
            try:
                socket.send_fds(control, [str(pid).encode()], ends)
            finally:
                for fd in ends:
                    os.close(fd)
        elif request[:1] == b"w" and request[1:].isdigit():
            control.sendall(str(reap_child(int(request[1:]))).encode())


def spawn_kernel(separated: bool) -> tuple[int, list[int]]:
    """Fork a kernel; return its pid and the supervisor's ends of its four pipes."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        become_kernel(request_r, reply_w, stdout_w, stderr_w, separated)  # never returns
    for fd in (request_r, reply_w, stdout_w, stderr_w):
        os.close(fd)
    return pid, [request_w, reply_r, stdout_r, stderr_r]


def become_kernel(
    request_r: int, reply_w: int, stdout_w: int, stderr_w: int, separated: bool
) -> None:
    """In the forked child: keep only our pipes, drop to the code's uid, serve; never return.

    Descriptors 0-2 become /dev/null and the two output pipes, the control
    pipes move to 3 and 4, and everything else the supervisor held (the
    protocol stream, the cgroup files) is closed, so code run here cannot
    reach them. Then (`separated`) the child becomes CODE_UID with no
    capability, so it cannot reach init's or the supervisor's descriptors or
    signal them either. It is made dumpable again (as an exec would), so it may
    raise its own `oom_score_adj` and debug its own subprocesses.
    """
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        for source, target in ((null, 0), (stdout_w, 1), (stderr_w, 2)):
            os.dup2(source, target)
        request_fd, reply_fd = os.dup(request_r), os.dup(reply_w)
        os.dup2(request_fd, 3, inheritable=False)
        os.dup2(reply_fd, 4, inheritable=False)
        os.closerange(5, os.sysconf("SC_OPEN_MAX"))
        if separated:
            become(CODE_UID, 0)
        _prctl(PR_SET_DUMPABLE, 1)
        set_process_name(b"python3")  # not the zygote's name
        kernel_main(3, 4)
        code = 0
    finally:
        os._exit(code)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Supervisor:
    """Serve exec requests from stdin; one kernel at a time, each forked by the zygote."""

    def __init__(self, separated: bool, zygote: Zygote) -> None:
        self.cgroup = Cgroup()
        self.separated = separated
        self.zygote = zygote
        self.budget = CopyBudget.unlimited()
        self.kernel: Kernel | None = None
        self.seen: dict[str, tuple[int, int, int]] = {}
        self.refused_seen: set[tuple[str, str]] = set()

    def start_kernel(self) -> Kernel:
        """A fresh kernel from the zygote: the stack imported, nothing of an earlier kernel."""
        self.kernel = self.zygote.fork_kernel()
        return self.kernel

    def warm_up(self) -> None:
        """Run an empty cell before saying ready: the kernel is up and its paths are warm."""
        kernel = self.kernel
        if kernel is None:
            return
        send_message(kernel.request_w, {"id": 0, "code": "None"})
        ready, _, _ = select.select([kernel.reply_r], [], [], 30.0)
        if ready:
            receive_message(kernel.reply_r)
        self.drain(kernel, Capture(0), Capture(0))

    def stop_kernel(self) -> None:
        """Kill the kernel and its process group, and release its pipes."""
        kernel, self.kernel = self.kernel, None
        if kernel is not None:
            kernel.kill()
            kernel.close_outputs()

    def serve(self) -> None:
        """Main loop: one request per stdin line until the host goes away."""
        write_frame(1, {"type": "ready", "protocol": PROTOCOL})
        stdin = os.fdopen(0, "rb", buffering=0)
        pending = b""
        while True:
            chunk = stdin.read(1 << 16)
            if not chunk:
                return  # the host closed the attach stream: end, and let the engine remove us
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                self.handle(line)

    def handle(self, line: bytes) -> None:
        """Run one request line, reporting any failure of ours as a fatal frame."""
        try:
            request = json.loads(line)
            validate_request(request)
        except (ValueError, TypeError) as exc:
            write_frame(1, {"type": "fatal", "message": f"bad request: {exc}"})
            return
        try:
            self.execute(request)
        except Exception as exc:
            self.stop_kernel()
            write_frame(1, {"type": "fatal", "message": f"{type(exc).__name__}: {exc}"})

    def execute(self, request: dict[str, Any]) -> None:
        """Run one program in the kernel under the request's limits and report it."""
        received = time.monotonic()
        kernel = self.kernel or self.start_kernel()
        out, err = Capture(request["stdout_cap"]), Capture(request["stderr_cap"])
        meter: Cgroup | Unmeasured = self.cgroup if request.get("measure", True) else UNMEASURED
        cpu_before, peak_before, oom_before = meter.cpu_seconds(), meter.peak(), meter.oom_kills()
        live = LiveOutput(request["id"], out, err, request.get("stream", True))
        display = request.get("display", True)
        send_message(
            kernel.request_w, {"id": request["id"], "code": request["code"], "display": display,
                               "print_values": request.get("print_values", True)}
        )
        reply, timed_out, sampled_peak = self.pump(kernel, live, request["timeout"], meter)
        killed_signal, state_reset = None, False
        if reply is None:
            self.kernel = None
            killed_signal = kernel.kill() or (signal.SIGKILL if timed_out else None)
            state_reset = True
        self.reap_strays(kernel)
        self.drain(kernel, out, err)  # a killed kernel's output pipes are still open
        if state_reset:
            kernel.close_outputs()
        oom_after = meter.oom_kills()
        oom = bool(
            not timed_out
            and reply is None
            and oom_before is not None
            and oom_after is not None
            and oom_after > oom_before
        )
        self.budget = CopyBudget(request, received)
        with code_identity(self.separated):
            refused = self.send_artifacts(request)
        listed, more = bounded_refusals(refused)
        frame = {
            "type": "result",
            "id": request["id"],
            "exit_code": exit_status(reply, killed_signal, timed_out, oom, kernel.returncode),
            "error": (reply or {}).get("error"),
            **stream_fields(out, err),
            "timed_out": timed_out,
            "killed_signal": killed_signal,
            "oom_killed": oom,
            "state_reset": state_reset,
            "cpu_seconds": difference(meter.cpu_seconds(), cpu_before),
            "peak_memory_bytes": peak_during(meter.peak(), peak_before, sampled_peak),
            "refused": listed,
            "refused_more": more,
            **reply_results(reply),
        }
        if self.kernel is None:
            # Before the frame, not after: the host reads the cgroup when the frame
            # arrives and charges what follows to the next run.
            self.start_kernel()
        write_frame(1, frame)

    def reap_strays(self, kernel: Kernel) -> None:
        """Kill leftover processes; skip the /proc scan when the task count rules them out.

        init, this supervisor, the zygote's threads and a live kernel are one task
        each at least, so exactly that many tasks means nothing else runs.
        Without a readable pids controller (gVisor), always scan.
        """
        alive = self.kernel is not None
        if self.cgroup.tasks() == 2 + self.zygote.tasks + (1 if alive else 0):
            return
        keep = {os.getpid(), self.zygote.pid}
        kill_strays(keep | {kernel.pid} if alive else keep)

    def pump(
        self,
        kernel: Kernel,
        live: LiveOutput,
        timeout: float,
        meter: Cgroup | Unmeasured,
    ) -> tuple[dict[str, Any] | None, bool, int | None]:
        """Move output into the captures until the kernel replies, dies or runs out of time.

        The head streams to the host as it comes (`LiveOutput`), within its rate.
        """
        streams = {kernel.stdout_r: live.out, kernel.stderr_r: live.err}
        deadline = time.monotonic() + timeout
        peak: int | None = None
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return None, True, peak
            wait = min(remaining, 0.05, live.wait(now))
            ready, _, _ = select.select([*streams, kernel.reply_r], [], [], wait)
            usage = meter.memory()
            if usage is not None:
                peak = max(peak or 0, usage)
            for fd in ready:
                if fd == kernel.reply_r:
                    return receive_message(kernel.reply_r), False, peak
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if data:
                    streams[fd].feed(data)
                else:
                    del streams[fd]
            live.send(time.monotonic())

    @staticmethod
    def drain(kernel: Kernel, out: Capture, err: Capture) -> None:
        """Read what is left in the output pipes without blocking."""
        for fd, capture in zip(kernel.outputs(), (out, err), strict=True):
            try:
                while data := os.read(fd, 1 << 16):
                    capture.feed(data)
            except OSError:
                pass  # BlockingIOError: the pipes are non-blocking, and nothing is left

    def send_artifacts(self, request: dict[str, Any]) -> list[dict[str, str]]:
        """Send new or changed regular files in /output; return what was refused and why.

        A refusal is reported once per session; `execute` lists at most
        `MAX_REFUSED_LISTED` per execution and counts the rest (`bounded_refusals`).
        """
        names, refused = list_artifacts(OUTPUT_DIR)
        sent = 0
        for name in names:
            path = os.path.join(OUTPUT_DIR, name).encode()
            try:
                info = os.lstat(path)
            except OSError:
                continue
            stamp = (info.st_size, info.st_mtime_ns, info.st_ino)
            if self.seen.get(name) == stamp:
                continue
            self.seen[name] = stamp
            if sent >= request["max_artifacts"]:
                refused.append({"name": name, "reason": "too many artifacts"})
                continue
            if info.st_size > request["max_artifact_bytes"]:
                refused.append({"name": name, "reason": f"too large ({info.st_size} bytes)"})
                continue
            budget_refusal = self.budget.take(info.st_size)
            if budget_refusal is not None:
                refused.append({"name": name, "reason": budget_refusal})
                continue
            try:
                data = read_regular_file(path, request["max_artifact_bytes"])
            except OSError:
                data = None
            if data is None:
                refused.append({"name": name, "reason": "changed while being read or not regular"})
                continue
            write_frame(
                1,
                {
                    "type": "artifact",
                    "id": request["id"],
                    "name": name,
                    "size": len(data),
                    "data": base64.b64encode(data).decode(),
                },
            )
            sent += 1
        fresh = [
            item for item in refused if (item["name"], item["reason"]) not in self.refused_seen
        ]
        self.refused_seen.update((item["name"], item["reason"]) for item in fresh)
        return fresh


class CopyBudget:
    """What one execution may still copy out of /output: bytes and time, both set by the host.

    The host writes no more than `copy_bytes` per execution and waits for the
    result no longer than its absolute deadline; `copy_seconds` (counted from
    the request's arrival) ends early enough that the artifact in flight and
    the result frame still fit before that deadline. Files past either budget
    are refused and listed, never sent.
    """

    def __init__(self, request: dict[str, Any], received: float) -> None:
        self.bytes_left: int = request["copy_bytes"]
        self.refusal: str = request["copy_refusal"][:200]
        self.deadline: float = received + request["copy_seconds"]

    @classmethod
    def unlimited(cls) -> CopyBudget:
        """Before the first request: nothing is copied outside an execution anyway."""
        return cls({"copy_bytes": 0, "copy_refusal": "", "copy_seconds": 0.0}, time.monotonic())

    def take(self, size: int) -> str | None:
        """Reserve `size` bytes for one artifact, or say why it may not be copied."""
        if time.monotonic() >= self.deadline:
            return "not copied: no time left before the host's deadline (timeout plus its grace)"
        if size > self.bytes_left:
            return self.refusal
        self.bytes_left -= size
        return None


def reply_results(reply: dict[str, Any] | None) -> dict[str, Any]:
    """The kernel's results, count and execution count, shaped but not trusted.

    The code runs in the kernel and may have written the reply itself: only the
    shape and the number are checked here (its size is bounded by MAX_REPLY_BYTES);
    the host validates every field.
    """
    reply = reply or {}
    results = reply.get("results")
    results = results[:MAX_RESULTS] if isinstance(results, list) else []
    dropped = reply.get("results_dropped")
    count = reply.get("execution_count")
    return {
        "results": [item for item in results if isinstance(item, dict)],
        "results_dropped": dropped if isinstance(dropped, int) and dropped >= 0 else 0,
        "execution_count": count if isinstance(count, int) and count >= 0 else None,
    }


def bounded_refusals(refused: list[dict[str, str]]) -> tuple[list[dict[str, str]], int]:
    """At most MAX_REFUSED_LISTED refusals with shortened names, and how many more there were.

    Code controls /output and can fill it with a million entries to refuse;
    the frame, and what the host shows the model, stay small.
    """
    listed = [
        {
            "name": shorten(str(item.get("name", "")), MAX_REFUSED_NAME),
            "reason": shorten(str(item.get("reason", "")), 200),
        }
        for item in refused[:MAX_REFUSED_LISTED]
    ]
    return listed, max(len(refused) - MAX_REFUSED_LISTED, 0)


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stream_fields(out: Capture, err: Capture) -> dict[str, Any]:
    """The result frame's stdout and stderr fields: kept text, totals and bytes dropped."""
    stdout, stdout_dropped = out.render()
    stderr, stderr_dropped = err.render()
    return {
        "stdout": stdout,
        "stdout_total": out.total,
        "stdout_dropped": stdout_dropped,
        "stderr": stderr,
        "stderr_total": err.total,
        "stderr_dropped": stderr_dropped,
    }


def validate_request(request: Any) -> None:
    """Refuse anything but a well-typed exec request (the host is trusted, but typos are not)."""
    if not isinstance(request, dict) or request.get("type") != "exec":
        raise ValueError("expected an object with type 'exec'")
    fields: dict[str, type | tuple[type, ...]] = {
        "id": int,
        "code": str,
        "timeout": (int, float),
        "stdout_cap": int,
        "stderr_cap": int,
        "max_artifact_bytes": int,
        "max_artifacts": int,
        "copy_bytes": int,
        "copy_refusal": str,
        "copy_seconds": (int, float),
    }
    for key, kind in fields.items():
        if not isinstance(request.get(key), kind) or isinstance(request.get(key), bool):
            raise ValueError(f"field {key!r} missing or of the wrong type")
    for flag in ("measure", "stream", "display", "print_values"):
        if not isinstance(request.get(flag, True), bool):
            raise ValueError(f"field {flag!r} must be true or false")


def exit_status(
    reply: dict[str, Any] | None, killed: int | None, timed_out: bool, oom: bool, code: int | None
) -> int:
    """The execution's exit status: the program's own, or 124 timeout, 137 OOM, 128+N signal."""
    if reply is not None:
        return int(reply.get("exit_code", 1))
    if timed_out:
        return 124
    if oom:
        return 137
    if killed:
        return 128 + killed
    return code if code is not None and code > 0 else 1


def difference(after: float | None, before: float | None) -> float | None:
    """After - before, when both are known."""
    return None if after is None or before is None else round(max(after - before, 0.0), 6)


def peak_during(peak_after: int | None, peak_before: int | None, sampled: int | None) -> int | None:
    """The execution's memory peak: the cgroup's mark if it rose during it, else our samples."""
    if peak_after is not None and peak_before is not None and peak_after > peak_before:
        return peak_after
    return sampled


def _prctl(option: int, value: int) -> None:
    """prctl(2) through libc; a failure leaves the flag as it was."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def seed_font_cache() -> str | None:
    """Copy matplotlib's prebuilt font cache into writable /tmp, as the code's user, who uses it.

    Returns the directory when it was created here, None when it existed or could not be.
    """
    target = os.environ.get("MPLCONFIGDIR", "/tmp/matplotlib")
    if os.path.isdir(FONT_CACHE) and not os.path.exists(target):
        try:
            shutil.copytree(FONT_CACHE, target)
            return target
        except OSError:
            pass
    return None


def main() -> None:
    """Entry point: the supervisor, which drops its privileges, starts the zygote and serves."""
    try:
        separated = separate_privileges()
    except OSError as exc:
        write_frame(1, {"type": "fatal", "message": f"cannot separate users: {exc}"})
        return
    _prctl(PR_SET_DUMPABLE, 0)
    zygote = Zygote(separated)
    supervisor: Supervisor | None = None
    try:
        zygote.spawn()  # first: it imports the stack while we set up
        supervisor = Supervisor(separated, zygote)
        try:
            supervisor.start_kernel()
        except OSError as exc:
            write_frame(1, {"type": "fatal", "message": f"cannot start a kernel: {exc}"})
            return
        supervisor.warm_up()
        supervisor.serve()
    finally:
        if supervisor is not None:
            supervisor.stop_kernel()
        zygote.stop()
        kill_strays({os.getpid()})


if __name__ == "__main__":
    main()
