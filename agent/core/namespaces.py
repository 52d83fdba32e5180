"""Named namespaces inside one sandbox: a caller's code run apart from the session's variables.

A sandbox's interpreter has one namespace. A face whose callers want several
independent ones (E2B's code contexts) runs their code through these
programs instead: the code executes in a dict of its own, kept in the
interpreter under its name (in a module entry of `sys.modules`, not in the
session's variables), with its own working directory, and the value of its
trailing expression printed as the runner prints a cell's (unless the session keeps values as
results only), and a result of its
own (the kernel's `_sbx_kernel`), with the namespace's own execution count. Being ordinary
programs through the gate, they are audited, counted and journaled, so a
namespace is rebuilt with the rest after a reset.
"""

from __future__ import annotations

_RUN = r'''
import ast, os, sys, types
store = sys.modules.setdefault("_sbx_namespaces", types.ModuleType("_sbx_namespaces"))
spaces = store.__dict__.setdefault("spaces", {})
space = spaces.setdefault(NAME, {"__name__": "__main__"})
kernel = sys.modules.get("_sbx_kernel")
if kernel is not None:
    kernel.count_cell(NAME)
back = os.getcwd()
os.makedirs(CWD, exist_ok=True)
os.chdir(CWD)
try:
    tree = ast.parse(CODE, FILE)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, FILE, "exec"), space)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), FILE, "eval"), space)
        if value is not None:
            if PRINTED:
                print(repr(value))
            if kernel is not None:
                kernel.show(value, main=True)
finally:
    os.chdir(back)
'''
_CLEAR = r'''
for _name in [name for name in globals() if not name.startswith("__")]:
    del globals()[_name]
globals().pop("_name", None)
'''
"""Empties the session's own namespace: its variables go, named namespaces and modules stay."""
_DROP = r'''
import sys
store = sys.modules.get("_sbx_namespaces")
if store is not None:
    store.__dict__.get("spaces", {}).pop(NAME, None)
'''


def in_namespace(code: str, name: str, cwd: str, *, printed: bool = True) -> str:
    """The program that runs `code` in the namespace `name` (made at first use) in `cwd`.

    `printed=False`: the trailing value is a result only, as the session's own cells show it.
    """
    values = {"CODE": code, "NAME": name, "CWD": cwd, "FILE": f"<{name}>", "PRINTED": printed}
    return f"exec({_RUN!r}, {values!r})\n"


def clear_variables() -> str:
    """The program that empties the session's own namespace (named ones stay)."""
    return _CLEAR


def drop_namespace(name: str) -> str:
    """The program that forgets the namespace `name` (its next use starts empty)."""
    return f"exec({_DROP!r}, {{'NAME': {name!r}}})\n"
