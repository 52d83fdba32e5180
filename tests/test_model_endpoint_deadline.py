"""The run's time budget holds through whatever the endpoint does: rate limits, hangs, trickles.

No test here asserts a benchmark: the bounds are "well under the wait the endpoint
asked for" (30 s), so a loaded machine cannot make them flaky, and code that sleeps
through the endpoint's wait fails them by a wide margin.
"""

from __future__ import annotations

import gzip
import json
import time

import scripted_llm
from sbx.agent.testing.scripted_model import Hang, RawReply, assistant, raw_completion
from scripted_llm import ask, policy, settings
from tools_support import make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

LONG_WAIT_S = 30
WELL_UNDER_S = 20
RATE_LIMITED = RawReply(
    status=429,
    headers=(("content-type", "application/json"), ("retry-after", str(LONG_WAIT_S))),
    body=json.dumps({"error": {"message": "rate limited"}}).encode(),
)


def _gate(tmp_path):
    gate, _ = make_gate(tmp_path, policy("calculate"))
    return gate


def test_a_retry_after_longer_than_the_time_left_ends_time_limit_at_once(llm, tmp_path):
    llm.script([RATE_LIMITED])
    started = time.monotonic()

    result = ask(llm, _gate(tmp_path), agent_settings=settings(max_wall_time="2s", max_retries=2))

    assert time.monotonic() - started < WELL_UNDER_S
    assert (result.status, result.answer) == ("time_limit", None)
    assert "answered HTTP 429: rate limited; asked to retry after 30 s, but the run has " in (
        result.message
    )
    assert result.message.startswith("The model request could not finish within max_wall_time "
                                     "of 2 s: ")
    assert result.message.endswith("(--max-time)")
    assert len(llm.requests) == 1


def test_a_retry_after_that_fits_is_waited_for(llm, tmp_path):
    short = RawReply(status=429, headers=(("retry-after-ms", "300"),), body=b"{}")
    llm.script([short, assistant("fine")])
    started = time.monotonic()

    result = ask(llm, _gate(tmp_path), agent_settings=settings(max_retries=1))

    assert (result.status, result.answer) == ("completed", "fine")
    assert time.monotonic() - started >= 0.3  # the endpoint's wait was honoured
    assert [r.headers.get("x-stainless-retry-count") for r in llm.requests] == ["0", "1"]


def test_a_hanging_endpoint_ends_time_limit_without_retrying_past_the_budget(llm, tmp_path):
    llm.script([Hang()])
    started = time.monotonic()

    result = ask(llm, _gate(tmp_path), agent_settings=settings(max_wall_time="2s", max_retries=2))

    assert time.monotonic() - started < WELL_UNDER_S
    assert result.status == "time_limit"
    assert len(llm.requests) == 1  # no retry started once the budget was spent


def test_an_endpoint_trickling_bytes_cannot_stretch_one_request_past_the_budget(llm, tmp_path):
    body = json.dumps({"choices": [{"message": {"content": "late"}}]}).encode()
    llm.script([RawReply(body=body, trickle_s=0.25)])  # each byte well within any read timeout
    started = time.monotonic()

    result = ask(
        llm, _gate(tmp_path),
        agent_settings=settings(max_wall_time="2s", request_timeout="60s", max_retries=0),
    )

    assert time.monotonic() - started < WELL_UNDER_S
    assert result.status == "time_limit"


def test_a_reply_body_over_max_reply_bytes_is_refused(llm, tmp_path):
    padding = "x" * 2_000_000
    llm.script([raw_completion({"role": "assistant", "content": "hi", "padding": padding})])

    result = ask(
        llm, _gate(tmp_path), agent_settings=settings(max_reply_bytes="1m", max_retries=2)
    )

    assert result.status == "model_error"
    assert result.message == (
        "Model request failed: the model endpoint's reply is larger than max_reply_bytes "
        "of 1048576"
    )
    assert len(llm.requests) == 1  # not retried: the same reply would come again


def test_a_compressed_reply_is_refused_since_its_decoded_size_is_unbounded(llm, tmp_path):
    bomb = gzip.compress(b" " * 10_000_000)  # 10 MB of JSON whitespace in about 10 kB
    headers = (("content-type", "application/json"), ("content-encoding", "gzip"))
    llm.script([RawReply(headers=headers, body=bomb)])

    result = ask(llm, _gate(tmp_path), agent_settings=settings(max_retries=0))

    assert result.status == "model_error"
    assert "compressed its reply ('gzip') although sbx asked for identity" in result.message
    assert llm.requests[0].headers["accept-encoding"] == "identity"
