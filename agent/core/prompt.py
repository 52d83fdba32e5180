"""The system prompt: one versioned file, `agent/core/prompts/system.md`, filled in before turn one.

The file starts with an HTML comment that carries its version; the comment is
not sent to the model, the version goes into every transcript so a run can
be traced to the exact wording. Placeholders use `string.Template` (`$data`)
so the prompt may contain braces (Python code) without escaping.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template

from sbx.agent.core.notes import DatasetNotes
from sbx.tools.builtin.data_summary import summarize_data
from sbx.tools.guard import DataGuard

PLANNING = """- When the question needs more than one or two executions, first write a plan with
  `update_plan`: a few short steps, each with its status and the tool you expect to use. The
  user watches it. Update it when a step finishes, fails or your approach changes (mark a step
  you give up `dropped`, add the new ones), and mark every step done or dropped before you
  answer.
"""
"""The prompt's planning paragraph, included when `update_plan` is enabled."""
REMEMBERING = """- When the user states or confirms a fact about a data file (its units, what a code
  means, rows to exclude), save it with `remember` in their words, so the next conversation
  on that file knows it. Never save your own results as notes.
"""
"""The prompt's paragraph about notes, included when `remember` is enabled."""
_HEADER = re.compile(r"\A<!--(.*?)-->\s*", re.DOTALL)
_VERSION = re.compile(r"version (\d+)")


@dataclass(frozen=True, kw_only=True)
class SystemPrompt:
    """The filled-in prompt and where its wording came from."""

    text: str
    """What the model receives as the system message."""
    version: str
    """The template's version, from its header comment."""
    redactions: dict[str, int] = field(default_factory=dict)
    """What the data guard replaced in the data summary (audited by the caller)."""


def load_template() -> tuple[str, str]:
    """The template's body (header comment removed) and its version."""
    prompts = resources.files("sbx.agent.core").joinpath("prompts")
    raw = prompts.joinpath("system.md").read_text(encoding="utf-8")
    header = _HEADER.match(raw)
    found = _VERSION.search(header.group(1)) if header else None
    body = raw[header.end() :] if header else raw
    return body, found.group(1) if found else "unversioned"


def load_section(tool_format: str) -> str:
    """How to run code in one tool format: `tools_native.md` or `tools_text.md` (same version)."""
    name = "tools_text.md" if tool_format == "text" else "tools_native.md"
    return resources.files("sbx.agent.core").joinpath(f"prompts/{name}").read_text(encoding="utf-8")


def build_system_prompt(
    *,
    data: Sequence[Path],
    tools: Sequence[str],
    timeout_s: float,
    memory: str,
    tool_format: str = "native",
    guard: DataGuard | None = None,
    notes: DatasetNotes | None = None,
) -> SystemPrompt:
    """Fill the template with the data summary, the enabled tools and the sandbox's limits.

    `tool_format` picks the section that says how to run code: native tool calls, or
    fenced ```python blocks for models without tool calling (`--tool-format text`).
    The data summary passes the `guard` (column rules, then the detectors) first, and so
    do the `notes` people saved about the data, which follow it (marked as notes).
    """
    section = notes.prompt_section() if notes is not None else ""
    summary = summarize_data(data, guard=guard) + (f"\n\n{section}" if section else "")
    guarded = guard.text(summary) if guard is not None else None
    body, version = load_template()
    body = body.replace("$how_to_run", load_section(tool_format).strip())
    planning = "update_plan" in tools and tool_format != "text"  # text mode offers no tools
    body = body.replace("$planning\n", PLANNING if planning else "")
    remembering = "remember" in tools and tool_format != "text"
    body = body.replace("$remembering\n", REMEMBERING if remembering else "")
    text = Template(body).substitute(
        tools=", ".join(f"`{name}`" for name in tools) or "(no tools)",
        data=guarded.text if guarded is not None else summary,
        timeout=f"{timeout_s:g} seconds",
        memory=memory,
    )
    counts = guarded.counts if guarded is not None else {}
    return SystemPrompt(text=text.strip() + "\n", version=version, redactions=counts)
