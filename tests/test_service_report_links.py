"""The web page's Markdown report links a chart by the API's artifact URL, not the server's path.

A real `sbx serve` (SQLite), httpx as a client, the scripted model, the real sandbox.
"""

from __future__ import annotations

import re

import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant, tool_call

serve = service_support.serve
llm = service_support.llm

PLOT = (
    "import matplotlib.pyplot as plt\n"
    "plt.bar(['a', 'b'], [3, 4])\n"
    "plt.savefig('/output/bars.png')\n"
    "print(7)\n"
)


@pytest.mark.docker
def test_the_report_links_charts_by_the_artifact_route(serve, llm, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    client = server.client(server.key("ana"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code=PLOT), assistant("The total is 7.")])
    base = f"/v1/conversations/{conversation}"
    run = client.post(f"{base}/questions", json={"question": "Plot."}).json()["run_id"]
    assert service_support.stream(client, run)[-1]["data"]["status"] == "completed"

    report = client.get(f"{base}/export?format=md").text

    links = re.findall(r"!\[[^\]]*\]\(<([^>]*)>\)", report)
    assert links == [f"/v1/runs/{run}/artifacts/bars.png"], report
    assert str(tmp_path) not in report  # no server path anywhere
    image = client.get(links[0])
    assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
