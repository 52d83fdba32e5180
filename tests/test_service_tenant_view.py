"""What a tenant reads carries no secret, no model endpoint, no host path, no engine error text:
the run's message, its live and stored events, the transcript download and the exports."""

from __future__ import annotations

import shutil

import pytest

import service_support
from sbx.agent.core.hosting.tenant_view import run_message
from sbx.agent.testing.scripted_model import HttpFailure
from service_support import FAKE_KEY, stream, upload

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

USER, PASSWORD = "sbx-user", "hunter2-topsecret"


def ask(client, conversation: str, question: str) -> str:
    answer = client.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": question})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run_id"])


def everything_the_tenant_reads(client, conversation: str, run_id: str) -> str:
    events = stream(client, run_id)  # live until the end, then from the store
    run = client.get(f"/v1/runs/{run_id}")
    transcript = client.get(f"/v1/conversations/{conversation}/transcript")
    report = client.get(f"/v1/conversations/{conversation}/export?format=md")
    assert run.status_code == 200 and transcript.status_code == 200, transcript.text
    assert report.status_code in (200, 409), report.text  # 409: the run left no record
    return "\n".join([repr(events), run.text, transcript.text, report.text])


@pytest.mark.docker
def test_the_model_endpoints_credentials_and_key_never_reach_the_tenant(store, serve, llm):
    with_credentials = llm.base_url.replace("http://", f"http://{USER}:{PASSWORD}@")
    server = serve(store, env={"OPENAI_BASE_URL": with_credentials})
    client = server.client(server.key("quinn"))
    llm.script([HttpFailure(status=401, message=f"Incorrect API key provided: {FAKE_KEY}")])
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    run_id = ask(client, conversation, "what is 1 + 1?")
    seen = everything_the_tenant_reads(client, conversation, run_id)
    assert client.get(f"/v1/runs/{run_id}").json()["status"] == "model_error"
    assert "HTTP 401" in seen  # the tenant still learns what went wrong
    for secret in (PASSWORD, FAKE_KEY, f"{USER}:", llm.base_url.removesuffix("/v1")):
        assert secret not in seen, secret


@pytest.mark.docker
def test_an_engine_failure_shows_an_incident_id_and_no_engine_text_or_host_path(store, serve, llm):
    server = serve(store)
    client = server.client(server.key("quinn"))
    dataset = upload(client, "sales.csv", b"a\n1\n").json()["id"]
    conversation = client.post("/v1/conversations", json={"datasets": [dataset]}).json()["id"]
    shutil.rmtree(server.data_dir / "datasets" / dataset)  # the host loses the file under it
    run_id = ask(client, conversation, "read it")  # the sandbox cannot start: no model turn
    seen = everything_the_tenant_reads(client, conversation, run_id)
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "error", run
    assert "incident inc-" in run["message"], run["message"]
    incident = run["message"].split("incident ")[1].split()[0]
    for leak in (str(server.data_dir), "docker.sock", "http+docker", "FileNotFoundError"):
        assert leak not in seen, leak
    assert incident in server.log  # the operator's log has the id, with the detail


def test_a_runs_end_reads_without_command_line_flags_or_the_endpoints_url(caplog):
    limit = ("The model request could not finish within max_wall_time of 300 s: the model "
             "endpoint http://10.0.0.7:8000/v1/ did not answer within 60 s (after 2 retries; "
             "raise --request-timeout) (--max-time)")
    assert run_message("time_limit", limit, "run-1") == (
        "The model request could not finish within max_wall_time of 300 s: the model endpoint "
        "did not answer within 60 s")
    turns = "The next request would exceed max_turns of 20 (--max-turns)"
    assert run_message("step_limit", turns, "run-1") == (
        "The next request would exceed max_turns of 20")
    failed = ("Model request failed: the model endpoint http://10.0.0.7:8000/v1/ answered "
              "HTTP 503 after 2 retries (--max-retries): overloaded")
    with caplog.at_level("ERROR"):
        said = run_message("model_error", failed, "run-2")
    assert said.startswith("The model could not answer: its service answered with an error "
                           "(HTTP 503). This is not caused by your question or data: try again")
    ident = said.split("quote incident ")[1].split()[0]
    assert "--" not in said and "10.0.0.7" not in said
    assert ident in caplog.text and "overloaded" in caplog.text and "10.0.0.7" not in caplog.text


def test_a_model_refusal_that_waiting_cannot_mend_is_the_operators_to_fix():
    refused = ("Model request failed: the model endpoint http://10.0.0.7:8000/v1/ answered "
               "HTTP 401: Incorrect API key provided; check the API key")
    said = run_message("model_error", refused, "run-3")
    assert said.startswith("The model could not answer: its service answered with an error "
                           "(HTTP 401). Your operator has to fix this"), said
    assert "try again" not in said and "quote incident inc-" in said
