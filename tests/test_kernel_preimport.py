"""Every interpreter starts with the data stack imported, and starts clean.

The runner's zygote imports images/preimport.txt once per container and forks each
kernel from that state, so a first question's `import pandas` costs nothing (on the
landed code every interpreter imported the stack itself: 0.5 s from the pool). A reset
forks a fresh copy of the clean state, and a pooled container serves one session, so a
variable or a patched module of one interpreter never shows in the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.engine import Engine
from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

STACK = ["numpy", "pandas", "IPython.core.formatters", "IPython.core.display_functions"]
"""What a first question needs (every cell's results go through IPython's display
protocol): imported ahead."""
ON_USE = ["matplotlib", "matplotlib.pyplot", "mpl_toolkits.mplot3d"]
"""Imported by the first cell that asks (every warm container would pay for them)."""
LOADED = f"""
import sys
print({STACK!r} == [name for name in {STACK!r} if name in sys.modules],
      [name for name in {ON_USE!r} if name in sys.modules])
"""
"""Asked before any import statement of the cell's own (`sys` is always loaded)."""
PATCH = "import numpy, pandas\npandas.read_csv = None\nnumpy.pi = 3\nx = 5"
STATE = "import numpy, pandas\nprint(pandas.read_csv is None, numpy.pi == 3, 'x' in globals())"


@pytest.fixture
def session(engine: Engine, runtime: str, tmp_path: Path) -> Iterator[Session]:
    """A session whose container preimports, as the warm pool's do."""
    spec = SessionSpec(
        limits=Limits(timeout="5s", runtime=runtime), image=TEST_IMAGE, output_dir=tmp_path,
        preimport=True,
    )
    with Session.open(spec, engine=engine) as live:
        yield live


def test_the_first_cell_finds_the_stack_imported(session: Session) -> None:
    assert session.run(LOADED).stdout == "True []\n"
    plot = session.run(
        "import matplotlib, matplotlib.pyplot as plt\nprint(matplotlib.get_backend())\n"
        "plt.plot([1, 2])\nplt.savefig('/output/p.png')"
    )
    assert plot.ok and plot.stdout.lower() == "agg\n"
    assert [a.name for a in plot.artifacts] == ["p.png"]
    assert not plot.stderr  # matplotlib found its cache (no temporary directory, no warning)


def test_the_display_protocol_comes_without_ipythons_shell(session: Session) -> None:
    shell = ("import sys\n"
             "print('IPython' in sys.modules, 'IPython.core.interactiveshell' in sys.modules)")
    assert session.run(shell).stdout == "False False\n"  # the formatters without the package's init
    shown = session.run("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    assert shown.ok and "<table" in (shown.results[0].html or "")
    assert session.run(shell).stdout == "False False\n"
    package = session.run(
        "import IPython\nfrom IPython.display import HTML, display\n"
        "print(IPython.core.formatters.DisplayFormatter.__name__, IPython.get_ipython())\n"
        "display(HTML('<b>shown</b>'))")
    assert package.ok, package.stderr
    assert package.stdout == "DisplayFormatter None\n"  # the package whole, its submodules set
    assert [result.html for result in package.results] == ["<b>shown</b>"]


def test_pyplot_leaves_the_3d_projection_until_a_figure_asks_for_it(session: Session) -> None:
    """Importing pyplot no longer imports mplot3d (50-145 ms of CPU), yet `projection='3d'`
    works as before: the registry imports it on first use."""
    flat = session.run("import sys, matplotlib.pyplot as plt\nimport matplotlib.projections as p\n"
                       "print('mpl_toolkits.mplot3d' in sys.modules, '3d' in "
                       "p.get_projection_names())")
    assert (flat.ok, flat.stdout, flat.stderr) == (True, "False False\n", "")
    solid = session.run("ax = plt.figure().add_subplot(projection='3d')\n"
                        "ax.plot([0, 1], [0, 1], [0, 1])\nplt.savefig('/output/solid.png')\n"
                        "print(type(ax).__name__, '3d' in p.get_projection_names())")
    assert (solid.ok, solid.stdout, solid.stderr) == (True, "Axes3D True\n", "")
    assert [a.name for a in solid.artifacts] == ["solid.png"]
    direct = session.run("from mpl_toolkits.mplot3d import Axes3D\nprint(Axes3D.name)")
    assert direct.stdout == "3d\n"


def test_a_reset_forks_a_clean_interpreter_from_the_imported_state(session: Session) -> None:
    """Module attributes the last interpreter changed are gone with it: the zygote never
    runs code, so what it forks is the state right after the imports."""
    assert session.run(PATCH).ok
    assert session.run(STATE).stdout == "True True True\n"
    reset = session.run("import os; os._exit(3)")
    assert reset.state_reset and reset.exit_code == 3
    assert session.run(LOADED).stdout == "True []\n"
    assert session.run(STATE).stdout == "False False False\n"


def test_no_state_of_one_pooled_session_reaches_the_next(engine: Engine, tmp_path: Path) -> None:
    key = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="20s"))
    caps = HostCaps(sandboxes=4, memory=16 << 30, cpus=32.0)
    capacity = HostCapacity(directory=tmp_path / "ledger", caps=caps)
    config = PoolConfig(size=1)
    spec = SessionSpec(limits=key.limits, image=TEST_IMAGE, output_dir=tmp_path)
    with Pool.start(engine=engine, capacity=capacity, config=config, warm=[key]) as pool:
        assert pool.wait_warm(key)
        with pool.session(spec) as first:
            assert first.run(PATCH).ok
        assert pool.wait_warm(key)
        with pool.session(spec) as second:
            assert second.run(LOADED).stdout == "True []\n"
            assert second.run(STATE).stdout == "False False False\n"


def test_a_restore_ready_container_imports_the_modules_the_host_names_too(
    engine: Engine, runtime: str, tmp_path: Path
) -> None:
    """`also_import` (the restore-ready containers') is imported past the data stack; a
    name that is not a module name never reaches the runner, one that fails is skipped."""
    spec = SessionSpec(limits=Limits(timeout="20s", runtime=runtime), image=TEST_IMAGE,
                       output_dir=tmp_path, preimport=True,
                       also_import=("colorsys", "wave; import os", "no_such_module_here"))
    with Session.open(spec, engine=engine) as s:
        loaded = s.run("import sys\nprint([m for m in ('pandas', 'colorsys', 'wave') "
                       "if m in sys.modules])")
        assert loaded.stdout == "['pandas', 'colorsys']\n"
    plain = replace(spec, preimport=False)
    with Session.open(plain, engine=engine) as s:  # created for a caller: nothing ahead
        assert s.run("import sys\nprint('colorsys' in sys.modules)").stdout == "False\n"


def test_a_small_container_imports_nothing_before_the_first_question(
    engine: Engine, runtime: str, tmp_path: Path
) -> None:
    """Under 384 MiB the stack would take most of the memory (gVisor could not even start
    a container of 128 MiB with it): nothing is preimported, and the code imports it."""
    limits = Limits(runtime=runtime, memory="256m")
    spec = SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path, preimport=True)
    with Session.open(spec, engine=engine) as s:
        assert s.run("import sys\nprint('pandas' in sys.modules)").stdout == "False\n"
        assert s.run("import pandas\nprint(pandas.Series([1, 2]).sum())").stdout == "3\n"


def test_a_container_created_for_a_caller_imports_nothing_ahead(
    engine: Engine, tmp_path: Path
) -> None:
    """Only the warm pool preimports (off the caller's path): a container created for a
    caller, as `sbx exec` does, would make it wait for imports its code may never use."""
    spec = SessionSpec(limits=Limits(timeout="20s"), image=TEST_IMAGE, output_dir=tmp_path)
    with Session.open(spec, engine=engine) as s:
        assert s.run("import sys\nprint('pandas' in sys.modules)").stdout == "False\n"


REUSE = """
import resource
counts = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(4 << 20)  # zeroed: every page touched
    del block
    counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(counts[0] > 500, counts[1] < 100)
"""
"""A 4 MiB block twice: with glibc's threshold at start (128 KiB) it is mapped, faulted in
and unmapped each time (about 1024 faults twice); primed, the second reuses the first's pages."""


def test_every_kernel_reuses_a_freed_large_block_from_its_first_cell(
    engine: Engine, tmp_path: Path
) -> None:
    """The zygote primes glibc's mmap threshold before forking (`prime_malloc`), so pandas'
    arrays of a few MiB are reused from the heap instead of faulted in anew, in the first
    kernel and in one forked after a reset. runc only: gVisor reports no page faults."""
    spec = SessionSpec(limits=Limits(timeout="20s"), image=TEST_IMAGE, output_dir=tmp_path)
    with Session.open(spec, engine=engine) as s:
        assert s.run(REUSE).stdout == "True True\n"
        assert s.run("import os; os._exit(3)").state_reset
        assert s.run(REUSE).stdout == "True True\n"
