"""The run's code made to run next to its data: `/data/...` becomes `DATA_DIR / ...`.

In the sandbox the code read its data under `/data` and wrote files to
`/output`. An export starts with a header that sets `DATA_DIR = Path(".")`
and `OUTPUT_DIR = Path("output")` (one line each to change), and every plain
string literal naming a path there is rewritten, with Python's own tokenizer
(never a text search, so code, comments and other strings stay as they
were):

    "/data/sales.csv"    ->  str(DATA_DIR / 'sales.csv')
    "/data"              ->  str(DATA_DIR)
    "/data/"             ->  (str(DATA_DIR) + '/')
    "/output/plot.png"   ->  str(OUTPUT_DIR / 'plot.png')

`str(...)` keeps every use working (`open`, `pd.read_csv`, `+`, `.endswith`).
Not rewritten, and said so in a comment above the code: f-strings, bytes and
strings implicitly joined to a neighbour (`"/data/" "a.csv"`) that begin with
`/data` or `/output`, and code that does not tokenize but names them. A
message such as `print("saved /output/a.png")` is left alone, silently.

Every value from the transcript that lands in a comment (file names, digests,
the question) is escaped to one line (`safe_text`): a newline in a hostile
file name must not start a line of code.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Mapping, Sequence

from sbx.tools.text_safety import safe_text

_ROOTS = {"/data": "DATA_DIR", "/output": "OUTPUT_DIR"}
_LEFT_OVER = re.compile(r"(?<![\w./])/(?:data|output)(?:/|\b(?![.-]))")
LEFT_OVER_NOTE = (
    "# sbx export: this code still names /data or /output (an f-string, bytes or a joined\n"
    "# string); write those paths with DATA_DIR or OUTPUT_DIR by hand to run it elsewhere.\n"
)


HEADER_NAMES = ("Path", "DATA_DIR", "OUTPUT_DIR", "run_cell")
"""What the export's own header defines: a reset keeps them."""
RESET_CODE = (
    "for _name in [n for n in globals() if not n.startswith('_') and n not in "
    f"{('In', 'Out', 'get_ipython', 'exit', 'quit', *HEADER_NAMES)!r}]:\n"
    "    del globals()[_name]"
)
"""Forget every name the conversation's code defined, as a reset that nothing restored did."""


def comment(text: str) -> str:
    """`text` as one or more `# ` lines, each escaped to a single line."""
    lines = text.splitlines() or [""]
    return "\n".join(f"# {safe_text(line)}".rstrip() for line in lines)


def header(*, source: str, run_ids: Sequence[str], digests: Mapping[str, str]) -> str:
    """The first cell: where the code came from, the data it expects, DATA_DIR and OUTPUT_DIR."""
    lines = [
        comment(f"Exported by sbx from {source} (run {', '.join(run_ids)}): the model-written"),
        "# code of the run, in the order it ran. Read it before running it outside the sandbox.",
        "# The run read its data under /data and wrote files to /output; here those are DATA_DIR",
        "# and OUTPUT_DIR. Put the data files in DATA_DIR (by default, the current directory):",
    ]
    lines += [f"#   {safe_text(name)}  sha256 {safe_text(sha)}" for name, sha in digests.items()]
    lines += [
        "from pathlib import Path",
        "",
        'DATA_DIR = Path(".")',
        'OUTPUT_DIR = Path("output")',
        "OUTPUT_DIR.mkdir(exist_ok=True)",
    ]
    return "\n".join(lines) + "\n"


def rewrite_paths(code: str) -> str:
    """`code` with its `/data` and `/output` string literals rewritten (see the module)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return LEFT_OVER_NOTE + code if _LEFT_OVER.search(code) else code
    starts = _line_starts(code)
    edits: list[tuple[int, int, str]] = []
    left_over = False
    significant = [t for t in tokens if t.type not in _TRIVIA]
    for index, token in enumerate(significant):
        if token.type == _FSTRING_START:  # Python 3.12+: the literal text follows the start
            follow = significant[index + 1].string if index + 1 < len(significant) else ""
            left_over = left_over or _ROOT.match(follow) is not None
            continue
        if token.type != tokenize.STRING:
            continue
        replacement = None if _joined(significant, index) else _replacement(token.string)
        if replacement is None:
            left_over = left_over or _names_a_root(token.string)
            continue
        begin = starts[token.start[0] - 1] + token.start[1]
        end = starts[token.end[0] - 1] + token.end[1]
        edits.append((begin, end, replacement))
    for begin, end, replacement in reversed(edits):
        code = code[:begin] + replacement + code[end:]
    return LEFT_OVER_NOTE + code if left_over else code


_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
_ROOT = re.compile(r"/(?:data|output)(?:/|\b(?![.-]))")


def _names_a_root(literal: str) -> bool:
    """Does a literal left as it was begin with `/data` or `/output` (f-string, bytes, joined)?"""
    return _ROOT.match(literal.lstrip("rRuUbBfF").lstrip("'\"")) is not None


_TRIVIA = frozenset({tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT})


def _joined(tokens: Sequence[tokenize.TokenInfo], index: int) -> bool:
    """Is the string at `index` implicitly joined to a neighbouring string literal?"""
    before = tokens[index - 1].type if index > 0 else None
    after = tokens[index + 1].type if index + 1 < len(tokens) else None
    return tokenize.STRING in (before, after)


def _replacement(literal: str) -> str | None:
    """The expression for a path literal under `/data` or `/output`, else None."""
    prefix = literal[: len(literal) - len(literal.lstrip("rRuUbBfF"))].lower()
    if "f" in prefix or "b" in prefix:
        return None
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, str):
        return None
    for root, name in _ROOTS.items():
        if value == root:
            return f"str({name})"
        if value == root + "/":
            return f"(str({name}) + '/')"
        if value.startswith(root + "/"):
            return f"str({name} / {value[len(root) + 1 :]!r})"
    return None


def _line_starts(code: str) -> list[int]:
    """Offsets of each line's first character, as tokenize numbers lines (from 1)."""
    starts = [0]
    for line in io.StringIO(code):
        starts.append(starts[-1] + len(line))
    return starts
