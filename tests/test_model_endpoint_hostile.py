"""A broken or hostile model endpoint: every reply ends the run cleanly or is normalised.

Real SDK, real HTTP, real gate and audit log; the endpoint is the scripted
server playing raw bodies (a proxy's HTML page, list content, objects where
strings belong, bad token counts, lone surrogates, megabytes of text).
"""

from __future__ import annotations

import json

from click.testing import CliRunner

import scripted_llm
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import RawReply, Reply, assistant, call, raw_completion
from scripted_llm import FAKE_KEY, ask, policy, settings
from tools_support import events, make_gate, records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

CALC_ONLY = "[tools.calculate]\nenabled = true\n"
HTML = b"<html><head><title>502</title></head><body>Bad Gateway\x1b]52;c;AAAA\x07</body></html>"


def _calc_gate(tmp_path, **extra):
    return make_gate(tmp_path, policy("calculate", **extra))


def _cli(llm, tmp_path, *extra):
    """`sbx ask --json` with every file under tmp_path; returns (exit code, stdout, stderr)."""
    path = tmp_path / "sbx.toml"
    path.write_text(CALC_ONLY)
    args = ["ask", "q", "--json", "--base-url", llm.base_url, "--api-key", FAKE_KEY,
            "--model", "scripted", "--policy", str(path), "--max-retries", "0",
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out"), *extra]
    outcome = CliRunner().invoke(cli, args)
    return outcome.exit_code, outcome.stdout, outcome.stderr


def _transcript(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]


def _tool_call(arguments, *, call_id="c1", name="calculate", usage=None):
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]}
    return raw_completion(message, usage=usage, finish_reason="tool_calls")


def test_a_200_html_page_from_a_proxy_is_a_model_error_with_the_page_escaped(llm, tmp_path):
    llm.script([RawReply(headers=(("content-type", "text/html; charset=utf-8"),), body=HTML)])

    code, stdout, stderr = _cli(llm, tmp_path)

    assert code == 4, stderr
    assert "Traceback" not in stderr
    document = json.loads(stdout)  # --json still prints its document
    assert document["status"] == "model_error"
    message = document["message"]
    assert message.startswith("Model request failed: the model endpoint's reply is not JSON "
                              "(content-type 'text/html; charset=utf-8', ")
    assert "<html><head><title>502</title></head><body>Bad Gateway\\x1b]52;c;AAAA\\x07" in message
    assert "\x1b" not in stderr and "\x07" not in stderr  # the page cannot drive the terminal
    transcript = _transcript(tmp_path)
    assert transcript[-1]["type"] == "run_end" and transcript[-1]["status"] == "model_error"


def test_json_that_is_not_a_completion_is_a_model_error(llm, tmp_path):
    llm.script([
        RawReply(body=b'{"choices": ['),
        RawReply(body=b"[1, 2, 3]"),
        raw_completion({"role": "assistant", "content": {"text": "an object"}}),
        raw_completion({"role": "assistant", "tool_calls": {"id": "x"}}),
    ])
    gate, _ = _calc_gate(tmp_path)
    messages = [ask(llm, gate, agent_settings=settings(max_retries=0)).message for _ in range(4)]

    assert messages[0].startswith("Model request failed: the model endpoint's reply is not JSON")
    assert messages[1] == ("Model request failed: the model endpoint sent a reply without any "
                           "choice: '[1, 2, 3]'")
    assert messages[2] == ("Model request failed: the model endpoint sent message content of JSON "
                           "type object; expected a string or a list of text parts")
    assert messages[3] == ("Model request failed: the model endpoint sent tool_calls of JSON type "
                           "object; expected a list")


def test_content_sent_as_a_list_of_parts_is_the_parts_text_joined(llm, tmp_path):
    parts = [{"type": "text", "text": "The answer "}, {"type": "image_url", "image_url": {}},
             {"type": "text", "text": "is 42."}]
    reply = raw_completion({"role": "assistant", "content": parts})
    llm.script([reply, reply])  # 42 was never computed: the validation turn, then the same
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate)

    assert (result.status, result.answer) == ("completed", "The answer is 42.")


def test_arguments_sent_as_an_object_are_taken_as_that_object(llm, tmp_path):
    llm.script([_tool_call({"expression": "6 * 7"}), assistant("42")])
    gate, log = _calc_gate(tmp_path)

    result = ask(llm, gate)

    assert (result.status, result.tool_calls) == ("completed", 1)
    assert llm.requests[1].last_tool_message == "42"
    assert events(log, "request")[0]["arguments"] == {"expression": "6 * 7"}
    sent_back = llm.requests[1].messages[-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent_back) == {"expression": "6 * 7"}  # a string, as the API wants


def test_unusable_token_counts_are_estimated_and_never_negative(llm, tmp_path):
    answer = {"role": "assistant", "content": "done"}
    llm.script([
        raw_completion(answer, usage={"prompt_tokens": "many", "completion_tokens": 1.5,
                                      "total_tokens": True}),
        raw_completion(answer, usage={"prompt_tokens": -400_000, "completion_tokens": -1,
                                      "total_tokens": -400_001}),
        raw_completion(answer),  # no usage at all
    ])
    gate, _ = _calc_gate(tmp_path)

    results = [ask(llm, gate) for _ in range(3)]

    for result in results:
        assert result.status == "completed"
        usage = result.usage
        assert usage.estimated and usage.prompt_tokens > 10 and usage.completion_tokens >= 1
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_negative_usage_cannot_keep_the_token_budget_from_binding(llm, tmp_path):
    negative = {"prompt_tokens": -400_000, "completion_tokens": 0, "total_tokens": -400_000}
    llm.script([_tool_call('{"expression": "1"}', usage=negative)])
    gate, _ = _calc_gate(tmp_path)
    question = "x" * 4000  # about 1000 tokens of prompt, estimated

    result = ask(llm, gate, question, agent_settings=settings(max_total_tokens=1500))

    assert result.status == "token_limit"
    assert result.usage.total_tokens > 1000 and result.usage.estimated
    assert len(llm.requests) == 1  # the second request, which would pass the budget, is not made


def test_an_answer_cut_off_at_the_output_limit_is_not_completed(llm, tmp_path):
    llm.script([Reply(content="The regions that grew fastest are", finish_reason="length")])

    code, stdout, stderr = _cli(llm, tmp_path)

    assert code == 4, stderr
    document = json.loads(stdout)
    assert (document["status"], document["answer"]) == ("truncated", None)
    assert document["message"] == (
        "The model's answer was cut off at the endpoint's output limit (finish_reason='length'); "
        "raise the endpoint's max_tokens or ask for a shorter answer"
    )
    assert "sbx: no answer, answer cut off" in stderr
    assert _transcript(tmp_path)[-1]["status"] == "truncated"


def test_lone_surrogates_are_stored_as_replacement_characters_and_the_run_ends(llm, tmp_path):
    text = "total \ud800 is \udfff 42"
    llm.script([
        _tool_call(json.dumps({"expression": "\ud800"}, ensure_ascii=False), name="calc\udc00"),
        raw_completion({"role": "assistant", "content": text}),
        raw_completion({"role": "assistant", "content": text}),  # after the validation turn
    ])

    code, stdout, stderr = _cli(llm, tmp_path)

    assert code == 0, stderr
    assert json.loads(stdout)["answer"] == "total \ufffd is \ufffd 42"
    transcript = _transcript(tmp_path)
    assert transcript[-1]["type"] == "run_end" and transcript[-1]["status"] == "completed"
    kept = (tmp_path / "run.jsonl").read_text(encoding="utf-8")  # valid UTF-8, or this raises
    assert '"arguments": "{\\"expression\\": \\"\ufffd\\"}"' in kept
    audit = records(tmp_path / "audit.jsonl")
    assert [r["data"]["tool"] for r in audit if r["event"] == "request"] == ["calc\ufffd"]
    shown = CliRunner().invoke(cli, ["audit", "show", str(tmp_path / "audit.jsonl")])
    assert shown.exit_code == 0 and "calc\ufffd" in shown.stdout


def test_an_oversized_answer_is_cut_with_a_marker_everywhere_it_is_kept(llm, tmp_path):
    llm.script([assistant("A" * 5_000_000)])

    code, stdout, stderr = _cli(llm, tmp_path)

    assert code == 0, stderr
    answer = json.loads(stdout)["answer"]
    assert answer.startswith("A" * 100_000 + "\n[sbx: the answer was cut here: the model wrote "
                             "5000000 characters, over max_answer_chars of 100000]")
    assert len(answer) < 100_200
    # kept cut: the reply's message, run_end's answer and its parts, each at most 100,200 chars
    assert (tmp_path / "run.jsonl").stat().st_size < 400_000


def test_oversized_arguments_are_refused_with_the_cap_and_not_kept(llm, tmp_path):
    huge = "1 + " * 1_250_000 + "1"  # 5 MB
    big = call("calculate", "big", expression=huge)
    llm.script([Reply(tool_calls=(big,), usage=(100, 100)), assistant("ok")])

    code, stdout, stderr = _cli(llm, tmp_path)

    assert code == 0, stderr
    told = llm.requests[1].last_tool_message
    assert told.startswith("1 validation error for tool 'calculate'")
    cap = "the arguments are 5000019 bytes, over the cap of 2097152 bytes (max_argument_bytes)"
    assert cap in told
    kept = llm.requests[1].messages[-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(kept) == {
        "sbx_note": "5000019 bytes of arguments not kept: over max_argument_bytes, 2097152"
    }
    assert len(json.dumps(llm.requests[1].messages)) < 50_000  # the conversation is bounded
    assert (tmp_path / "run.jsonl").stat().st_size < 50_000
    assert (tmp_path / "audit.jsonl").stat().st_size < 50_000
    request = [r["data"] for r in records(tmp_path / "audit.jsonl") if r["event"] == "request"][0]
    assert request["arguments_bytes"] == 5_000_019 and len(request["arguments_sha256"]) == 64
    assert len(request["arguments_raw"]) == 1024


def test_a_lone_surrogate_in_what_is_sent_is_replaced_not_a_crash(llm, tmp_path):
    llm.script([assistant("fine")])  # e.g. a question from argv that was not UTF-8
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate, "bad \udcff question")

    assert (result.status, result.answer) == ("completed", "fine")
    assert llm.requests[0].messages[-1]["content"] == "bad \ufffd question"
