"""The workloads `sbx bench` runs in every mode: what each program is and what it must print.

A workload is a list of steps. A session (and the persistent floor) runs each
step as one execution and keeps state between them. Modes without state (a
fresh container, `docker run`, `python3 -c`) run step *i* as the program made
of steps 1..i, which is what an agent without a session has to resend.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One benchmark program."""

    name: str
    """Short name used in the table and the JSON."""
    steps: tuple[str, ...]
    """The executions, in order; state flows from one to the next in a session."""
    expect: str
    """Text the last step's stdout must contain (a wrong answer is an error, not a sample)."""
    modules: tuple[str, ...] = ()
    """Modules the host floor needs (it is skipped when the host lacks them)."""
    artifact: bool = False
    """The program writes `/output/plot.png`, which must come back to the host."""

    def fresh_programs(self) -> list[str]:
        """The programs a stateless mode runs: step i carries steps 1..i."""
        return ["\n".join(self.steps[: i + 1]) for i in range(len(self.steps))]


PRINT_ONE = Workload(name="print(1)", steps=("print(1)",), expect="1")
PANDAS_MEAN = Workload(
    name="pandas mean 100k",
    steps=(
        "import numpy as np\nimport pandas as pd\n"
        "print(pd.DataFrame({'x': np.arange(100_000)})['x'].mean())",
    ),
    expect="49999.5",
    modules=("pandas", "numpy"),
)
STATEFUL_PAIR = Workload(name="stateful pair", steps=("x = 41", "print(x + 1)"), expect="42")
STDOUT_1MIB = Workload(
    name="1 MiB stdout",
    steps=("import sys\nsys.stdout.write('x' * (1 << 20))\nsys.stdout.flush()",),
    expect="xxxx",
)
PNG_ARTIFACT = Workload(
    name="PNG artifact",
    steps=(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(4, 3))\nplt.plot([1, 3, 2])\n"
        "plt.savefig('/output/plot.png')\nplt.close('all')\nprint('saved')",
    ),
    expect="saved",
    modules=("matplotlib",),
    artifact=True,
)
WORKLOADS = (PRINT_ONE, PANDAS_MEAN, STATEFUL_PAIR, STDOUT_1MIB, PNG_ARTIFACT)
FIRST_QUESTION = "first question, 10 MB CSV"
"""A new conversation's first program with data, measured apart (`bench/first_question.py`)."""

FLOOR_SOURCE = r"""
import base64, contextlib, io, json, os, sys
namespace = {"__name__": "__main__"}
seen = {}
for line in sys.stdin:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(json.loads(line), namespace)
    files = {}
    for name in os.listdir("/output"):
        info = os.stat("/output/" + name)
        if seen.get(name) != (info.st_size, info.st_mtime_ns):
            seen[name] = (info.st_size, info.st_mtime_ns)
            with open("/output/" + name, "rb") as handle:
                files[name] = base64.b64encode(handle.read()).decode()
    sys.stdout.write(json.dumps({"stdout": out.getvalue(), "files": files}) + "\n")
    sys.stdout.flush()
"""
"""The persistent floor: the least a process must do to run code and return output and files."""

SHIP_OUTPUT = (
    "\nimport base64 as _b, os as _o, sys as _s\n"
    "for _n in _o.listdir('/output'):\n"
    "    _s.stdout.write('\\n' + _n + ':' + "
    "_b.b64encode(open('/output/' + _n, 'rb').read()).decode())\n"
)
"""Appended to `docker run` programs: the only way out for a file of a `--rm` container."""
