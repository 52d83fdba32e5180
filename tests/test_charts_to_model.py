"""The model sees its charts: `plt.show()` and saved PNGs reach it as image input, or described.

Real Docker (the image's runner captures `plt.show()`), the real SDK over HTTP
to the scripted server; only the model is scripted.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.charts import PNG_MAGIC
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.model.boundary import IMAGE_WITHHELD
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

PLOT = (
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 2, 3], [3, 1, 2])\n"
    "plt.title('Revenue by quarter')\n"
    "plt.xlabel('quarter')\n"
    "plt.show()\n"
    "plt.figure()\n"
    "plt.savefig('/output/empty.png')\n"
)


def _ask(llm, tmp_path: Path, vision: list[str], code: str = PLOT):
    llm.script([tool_call("execute_python", code=code), assistant("The line dips in Q2.")])
    config = load_config(None)
    config = replace(config, settings=config.settings.model_copy(update={"vision_models": vision}))
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    transcript = tmp_path / "c.jsonl"
    with App.open(config, environ={}, audit_log=tmp_path / "a.jsonl", image=TEST_IMAGE) as app:
        with app.conversation(spec, endpoint=endpoint, transcript=transcript) as conversation:
            result = conversation.ask("Plot it.")
    assert result.status == "completed", result.message
    return llm.requests[1].body["messages"][-1], transcript.read_text()


@pytest.mark.docker
def test_a_vision_model_is_shown_the_chart_after_the_tool_result(llm, tmp_path):
    message, transcript = _ask(llm, tmp_path, ["scripted"])
    assert message["role"] == "user"
    text, *images = message["content"]
    assert "figure-1.png: image/png" in text["text"] and "(shown below)" in text["text"]
    assert "'Revenue by quarter'" in text["text"] and "'quarter'" in text["text"]
    assert "empty.png" in text["text"] and "nothing drawn" in text["text"]  # an empty plot
    assert len(images) == 2
    url = images[0]["image_url"]["url"]
    assert images[0]["type"] == "image_url" and url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]).startswith(PNG_MAGIC)
    assert "data:image/png" not in transcript  # the file is an artifact; the record says so
    assert "an image was shown to the model here" in transcript


@pytest.mark.docker
def test_without_vision_the_model_gets_a_description_instead(llm, tmp_path):
    message, _ = _ask(llm, tmp_path, [])
    assert message["role"] == "user" and isinstance(message["content"], str)
    assert "you cannot see them" in message["content"]
    assert "figure-1.png: image/png" in message["content"]
    assert "'Revenue by quarter'" in message["content"] and " px" in message["content"]
    assert "data:image" not in json.dumps(llm.requests[1].body)


@pytest.mark.docker
def test_a_chart_whose_own_text_holds_a_card_number_is_described_not_shown(llm, tmp_path):
    code = ("import matplotlib.pyplot as plt\n"
            "card = ''.join(['4111', '1111', '1111', '1111'])\n"
            "plt.plot([1, 2], [2, 1])\nplt.title('paid with ' + card)\nplt.show()\n")
    message, _ = _ask(llm, tmp_path, ["scripted"], code)
    text, withheld = message["content"]
    assert "'paid with [card]'" in text["text"]
    assert withheld == {"type": "text", "text": IMAGE_WITHHELD}  # the pixels show the title
    assert "data:image" not in json.dumps(llm.requests[1].body)


@pytest.mark.docker
def test_without_vision_the_model_reads_each_charts_data(llm, tmp_path):
    code = ("import matplotlib.pyplot as plt\n"
            "plt.bar(['north', 'south'], [120, 80]); plt.title('Sales by region')\n"
            "plt.ylabel('revenue (EUR)'); plt.show()\n"
            "card = ''.join(['4111', '1111', '1111', '1111'])\n"
            "plt.plot([1, 2, 3], [3, 1, 2], label='paid with ' + card); plt.show()\n")
    message, _ = _ask(llm, tmp_path, [], code)
    text = message["content"]
    assert "What the charts hold" in text
    assert "bar chart 'Sales by region', y: 'revenue (EUR)', north [Group 0] = 120.0" in text
    assert "south [Group 0] = 80.0" in text
    assert "line chart" in text and "(1, 3), (2, 1), (3, 2)" in text
    sent = json.dumps(llm.requests[1].body)
    assert "4111111111111111" not in sent  # the guard saw the chart's own text
    assert "paid with [card]" in sent


def test_the_cli_shows_an_image_message_as_its_text():
    import io

    from sbx.agent.cli.display import Progress

    out = io.StringIO()
    content = [{"type": "text", "text": "The images your code saved"},
               {"type": "text", "text": "[an image was shown to the model here]"}]
    Progress(out)({"type": "message", "run_id": "r", "turn": 1,
                   "message": {"role": "user", "content": content}})
    assert "!  The images your code saved [an image was shown to the model here]" in out.getvalue()
