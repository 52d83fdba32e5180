"""Ptrace and unshare fail under the shipped profile; real work runs."""

from __future__ import annotations

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

DENIED = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def outcome(ret):
    return "allowed" if ret == 0 else os.strerror(ctypes.get_errno())
print("ptrace", outcome(libc.ptrace(0, 0, 0, 0)))                 # PTRACE_TRACEME
print("unshare", outcome(libc.unshare(0x10000000)))              # CLONE_NEWUSER
print("keyctl", outcome(libc.syscall(250, 0, 0, 0, 0)))
print("bpf", outcome(libc.syscall(321, 0, 0, 0)))
print("userfaultfd", outcome(libc.syscall(323, 0)))
print("perf_event_open", outcome(libc.syscall(298, 0, 0, -1, -1, 0)))
print("personality", outcome(libc.personality(0x0040000)))       # ADDR_NO_RANDOMIZE
"""

WORKLOAD = r"""
import multiprocessing, subprocess, threading
import numpy as np, pandas as pd, scipy.stats as stats, matplotlib.pyplot as plt
import seaborn as sns, statsmodels.api as sm
from sklearn.ensemble import RandomForestClassifier
rng = np.random.default_rng(0)
df = pd.DataFrame({"x": rng.normal(size=2000), "g": rng.integers(0, 3, 2000)})
df["y"] = 2 * df.x + rng.normal(size=2000)
df.to_parquet("/tmp/d.parquet"); df = pd.read_parquet("/tmp/d.parquet")
df.head(50).to_excel("/tmp/d.xlsx"); pd.read_excel("/tmp/d.xlsx")
print("ttest", stats.ttest_ind(df.x, df.y).pvalue >= 0)
print("ols", round(sm.OLS(df.y, sm.add_constant(df.x)).fit().params["x"]))
RandomForestClassifier(n_estimators=20, n_jobs=2).fit(df[["x", "y"]], df.g)
sns.histplot(df.x); plt.savefig("/output/hist.png")
with multiprocessing.Pool(2) as pool:
    print("pool", pool.map(abs, [-1, -2]))
print("sub", subprocess.run(["echo", "ok"], capture_output=True, text=True).stdout.strip())
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
"""


def test_ptrace_unshare_and_friends_are_denied_under_runc(engine, tmp_path) -> None:
    with Session.open(
        SessionSpec(limits=Limits(runtime="runc"), image=TEST_IMAGE, output_dir=tmp_path),
        engine=engine,
    ) as session:
        result = session.run(DENIED)
    outcomes = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert outcomes == dict.fromkeys(outcomes, "Operation not permitted")
    assert set(outcomes) >= {"ptrace", "unshare", "keyctl", "bpf", "userfaultfd"}


def test_data_science_workload_runs_under_the_profile(engine, runtime, tmp_path) -> None:
    limits = Limits(runtime=runtime, timeout="120s", memory="1g")
    with Session.open(
        SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path), engine=engine
    ) as s:
        result = s.run(WORKLOAD)
    assert result.ok, (result.error, result.stderr[-2000:])
    lines = result.stdout.splitlines()
    assert lines[:2] == ["ttest True", "ols 2"]
    assert "pool [1, 2]" in lines and "sub ok" in lines and "thread" in lines
    assert [a.name for a in result.artifacts] == ["hist.png"]
