"""The model sees its charts: images an execution saved, as image input or as a description.

After a turn's tool results, the PNG and JPEG files its executions copied out
of `/output` (what the code saved, and every `plt.show()`, which the runner
saves as `figure-N.png`) are shown to the model in one user message:

- to a model the policy names in `[agent] vision_models` (`"*"`: any), as
  Chat Completions image parts (`image_url` with a `data:` URL), at most
  `max_images` of them, each at most `max_image_bytes` (larger ones, and
  those past the count, are described instead); the model client's boundary
  withholds the images of a message whose text the data guard had to change
  (`sbx.agent.model.boundary`): the pixels would show that text;
- to any other model, as a short text description: the file, its type and
  pixel size read from its header, and, where matplotlib made it, the
  titles, axis labels and how much each axes holds (the runner writes them
  into the PNG as text, `sbx:figure`), so an empty plot or a missing label
  shows; then each figure's structured chart (the execution's rich results:
  type, title, axes, and its bars, points, slices or boxes, bounded), so it
  reads the numbers it plotted, not only the title.

A file is an image by its leading bytes, never by its name. Everything read
from a file is the code's (the model's) own, bounded and reduced to
printable text before the model sees it. The transcript, the events and the
size estimate see the image parts as a short text (`without_images`): the
file itself is an artifact already. Only the latest turn's images stay in
the context: when new ones are shown, earlier ones become that text.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.agent.core.events import EventSink, MessageAdded
from sbx.agent.core.settings import AgentSettings
from sbx.agent.core.state import RunState
from sbx.agent.model.request_size import image_parts, without_images
from sbx.tools.outcome import ToolOutcome
from sbx.tools.text_safety import safe_text

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
FIGURE_META_KEY = b"sbx:figure"
"""The PNG text key the runner writes (images/runner.py, `FIGURE_META_KEY`)."""
HEADER_BYTES = 64 * 1024
"""How much of a file is read to describe it (PNG text chunks come before the pixels)."""
MAX_DESCRIPTION_CHARS = 600
MAX_CHARTS = 6
MAX_CHART_ITEMS = 20
MAX_POINTS_SHOWN = 12
MAX_CHART_CHARS = 1200
"""A chart's data told to a model without vision: this many charts, elements each, points
per line, and characters per chart (the code chose them all)."""


@dataclass(frozen=True, kw_only=True)
class Picture:
    """One image file an execution saved, as read from its header."""

    name: str
    """The file's name under `/output` (the code chose it)."""
    path: str
    """Where the copy lives on the host."""
    bytes: int
    """The file's size."""
    mime: str
    """`image/png` or `image/jpeg`."""
    size: tuple[int, int] | None
    """Width and height in pixels, when the header says."""
    figure: dict[str, Any] | None
    """The runner's `sbx:figure` text (titles, labels, artist counts), when matplotlib made it."""


def show_charts(
    state: RunState,
    outcomes: Sequence[ToolOutcome],
    settings: AgentSettings,
    model: str,
    emit: EventSink,
) -> None:
    """After a turn's tool results: show (or describe) the images its executions saved."""
    found = pictures(outcomes)
    if not found:
        return
    charts = [] if accepts_images(settings, model) else shown_charts(outcomes)
    for index, earlier in enumerate(state.messages):  # only the latest images stay
        if image_parts([earlier]):
            state.messages[index] = without_images(earlier)
    message = chart_message(found, settings, model)
    if charts:
        message["content"] += "\nWhat the charts hold (their data):\n" + "\n".join(
            f"- {chart_text(chart)}" for chart in charts)
    state.messages.append(message)
    emit(MessageAdded(run_id=state.run_id, turn=state.turns, message=without_images(message)))


def pictures(outcomes: Sequence[ToolOutcome]) -> list[Picture]:
    """The PNG and JPEG files the outcomes' executions saved, in order."""
    found = []
    for outcome in outcomes:
        for artifact in outcome.artifacts:
            picture = read_picture(artifact.name, artifact.path, artifact.size)
            if picture is not None:
                found.append(picture)
    return found


def shown_charts(outcomes: Sequence[ToolOutcome]) -> list[dict[str, Any]]:
    """The structured charts of the figures the outcomes' executions showed, at most MAX_CHARTS."""
    return [
        result.chart
        for outcome in outcomes
        if outcome.execution is not None
        for result in outcome.execution.results
        if result.chart
    ][:MAX_CHARTS]


def chart_text(chart: dict[str, Any], depth: int = 0) -> str:
    """One chart's type, title, axes and elements in a line, bounded (the code made it)."""
    kind = str(chart.get("type") or "unknown")
    parts = [f"{kind} chart" + (f" {str(chart['title'])!r}" if chart.get("title") else "")]
    for axis in ("x", "y"):
        if chart.get(f"{axis}_label"):
            parts.append(f"{axis}: {str(chart[f'{axis}_label'])!r}")
    elements = chart.get("elements")
    elements = elements[:MAX_CHART_ITEMS] if isinstance(elements, list) else []
    texts = [_element_text(kind, e, depth) for e in elements if isinstance(e, dict)]
    if texts:
        parts.append("; ".join(texts))
    return safe_text(", ".join(parts))[:MAX_CHART_CHARS]


def _element_text(kind: str, element: dict[str, Any], depth: int) -> str:
    label = str(element.get("label", ""))[:60]
    if kind == "bar":
        group = f" [{str(element.get('group'))[:40]}]" if element.get("group") else ""
        return f"{label}{group} = {element.get('value')}"
    if kind == "pie":
        angle = element.get("angle")
        share = f"{angle / 3.6:.1f}%" if isinstance(angle, (int, float)) else "?"
        return f"{label} {share}"
    if kind == "box_and_whisker":
        values = [element.get(key) for key in
                  ("min", "first_quartile", "median", "third_quartile", "max")]
        outliers = element.get("outliers")
        extra = f", {len(outliers)} outliers" if isinstance(outliers, list) and outliers else ""
        return f"{label}: min/q1/median/q3/max {values}{extra}"
    if kind in ("line", "scatter"):
        points = element.get("points")
        points = points if isinstance(points, list) else []
        shown = ", ".join(f"({p[0]}, {p[1]})" for p in points[:MAX_POINTS_SHOWN]
                          if isinstance(p, list) and len(p) == 2)
        more = f" ... {len(points)} points" if len(points) > MAX_POINTS_SHOWN else ""
        return f"{label}: {shown}{more}"
    if kind == "superchart" and depth == 0:
        return "[" + chart_text(element, depth + 1) + "]"
    return label


def read_picture(name: str, path: str, size: int) -> Picture | None:
    """The file as a `Picture`, or None when it is not a PNG or JPEG (or cannot be read)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEADER_BYTES)
    except OSError:
        return None
    if head.startswith(PNG_MAGIC):
        pixels = struct.unpack(">II", head[16:24]) if len(head) >= 24 else None
        return Picture(
            name=name, path=path, bytes=size, mime="image/png", size=pixels,
            figure=_figure_text(head),
        )
    if head.startswith(JPEG_MAGIC):
        return Picture(name=name, path=path, bytes=size, mime="image/jpeg", size=None, figure=None)
    return None


def _figure_text(head: bytes) -> dict[str, Any] | None:
    """The `sbx:figure` tEXt chunk's JSON, if the header holds one."""
    at = 8
    while at + 8 <= len(head):
        length, kind = struct.unpack(">I4s", head[at : at + 8])
        body = head[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(FIGURE_META_KEY + b"\x00"):
            try:
                found = json.loads(body[len(FIGURE_META_KEY) + 1 :].decode("latin-1"))
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
        if kind == b"IDAT":
            return None
        at += 12 + length
    return None


def describe(picture: Picture) -> str:
    """One line about the picture: name, type, pixels, and what matplotlib drew."""
    parts = [f"{picture.name}: {picture.mime}, {_kib(picture.bytes)}"]
    if picture.size is not None:
        parts.append(f"{picture.size[0]}x{picture.size[1]} px")
    figure = picture.figure or {}
    if figure.get("suptitle"):
        parts.append(f"title {str(figure['suptitle'])!r}")
    axes = figure.get("axes")
    if isinstance(axes, list):
        parts.append(f"{len(axes)} axes" if axes else "no axes: nothing drawn")
        parts.extend(_axes_text(ax) for ax in axes[:6] if isinstance(ax, dict))
    text = safe_text("; ".join(parts))
    return text[:MAX_DESCRIPTION_CHARS]


def _kib(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB"


def _axes_text(ax: dict[str, Any]) -> str:
    labels = ", ".join(
        f"{key} {str(ax.get(key))!r}" for key in ("title", "xlabel", "ylabel") if ax.get(key)
    )
    counts = {key: ax.get(key) for key in ("lines", "patches", "collections", "images")}
    drawn = ", ".join(f"{n} {key}" for key, n in counts.items() if isinstance(n, int) and n)
    return f"[{labels or 'no title or labels'}; {drawn or 'nothing drawn'}]"


def accepts_images(settings: AgentSettings, model: str) -> bool:
    """Whether the policy enables image input for this model."""
    return "*" in settings.vision_models or model in settings.vision_models


def chart_message(found: Sequence[Picture], settings: AgentSettings, model: str) -> dict[str, Any]:
    """The user message that shows (or describes) the pictures to the model."""
    shown: list[dict[str, Any]] = []
    described: list[str] = []
    vision = accepts_images(settings, model)
    for picture in found:
        fits = picture.bytes <= settings.max_image_bytes
        if vision and fits and len(shown) < settings.max_images:
            shown.append(_image_part(picture))
            described.append(f"{describe(picture)} (shown below)")
        else:
            described.append(describe(picture))
    intro = "The images your code saved (look at them before you answer):\n" if shown else (
        "The images your code saved (you cannot see them; this is what their files say):\n"
    )
    text = intro + "\n".join(f"- {line}" for line in described)
    if not shown:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, *shown]}


def _image_part(picture: Picture) -> dict[str, Any]:
    data = base64.b64encode(Path(picture.path).read_bytes()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{picture.mime};base64,{data}"}}
