"""The observation's last line: a removed API's replacement, or what to do about a missing module.

Removed APIs: the image recipe's table (`sbx.images.removed_apis`) is matched against the
error the code raised; its hint becomes the line.

Missing modules: what the model is told, and what the operator learns.

A program that imports a module the image lacks fails with `ModuleNotFoundError`;
the sandbox has no network, so no `pip install` can help. The observation then ends
with one line that lists what the image has (its recipe's lock, `images/requirements.lock`)
and says the operator can add the package; the execution's audit record keeps the
module's name and the principal (`missing_module`), which `sbx packages` counts and
`sbx serve`'s `/metrics` exposes (`sbx_package_requests_total{package}`). Adding one
is `sbx packages add NAME` (`sbx.images.add_package`).
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from sbx.images.removed_apis import RemovedApiTable, default_table
from sbx.sandbox.result import ExecutionResult

_MISSING = re.compile(r"^No module named '([A-Za-z_][A-Za-z0-9_.]{0,99})'")
_LOCKED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", re.MULTILINE)
TOP_PACKAGES = ("numpy", "pandas", "pyarrow", "scipy", "matplotlib", "seaborn", "scikit-learn",
                "statsmodels", "openpyxl")
"""Listed first: what `images/requirements.in` asks for (the rest are their dependencies)."""


def missing_module(result: ExecutionResult) -> str | None:
    """The top-level module a failed import named, or None (any other error, or no error)."""
    error = result.error
    return module_from_error(error.type, error.message) if error is not None else None


def module_from_error(error_type: object, message: object) -> str | None:
    """The top-level module of a `ModuleNotFoundError`'s message (a plain name), or None."""
    if error_type != "ModuleNotFoundError" or not isinstance(message, str):
        return None
    found = _MISSING.match(message)
    return found.group(1).split(".")[0] if found else None


@functools.cache
def image_packages() -> tuple[str, ...]:
    """The distributions the image's recipe locks, the requested ones first."""
    text = resources.files("sbx.images").joinpath("requirements.lock").read_text("utf-8")
    locked = sorted({name.lower() for name in _LOCKED.findall(text)})
    first = [name for name in TOP_PACKAGES if name in locked]
    return (*first, *[name for name in locked if name not in first])


def missing_module_line(result: ExecutionResult) -> str | None:
    """The observation's last line for a missing module, or None."""
    name = missing_module(result)
    if name is None:
        return None
    has = ", ".join(image_packages()[: len(TOP_PACKAGES)])
    return (f"[hint] {name!r} is not in this sandbox's image and cannot be installed (no "
            f"network); the image has {has} and their dependencies. Use those, or tell the "
            "user the operator can add the package to the image (sbx packages add).")


def removed_api_line(result: ExecutionResult, table: RemovedApiTable | None = None) -> str | None:
    """The observation's last line for an execution that failed on a removed API, or None."""
    if result.error is None:
        return None
    found = (table or default_table()).find(result.error.type, result.error.message)
    return f"[hint] {found.hint}" if found is not None else None


def execution_hint(result: ExecutionResult) -> str | None:
    """The one hint line an execution's observation ends with, if any."""
    return removed_api_line(result) or missing_module_line(result)
