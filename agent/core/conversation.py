"""`Conversation`: one sandbox session, the messages, the data and the transcript; ask again.

A conversation is what an analyst has with sbx: a first question, then
follow-ups that see the variables the earlier runs' code defined, because
every run of a conversation sends its code to the same sandbox session. Each
`ask()` is one run: its own run id, its own gate (per-run quotas, audit
records `run_start` .. `run_end`), its own budget, and a `RunResult`. The
messages carry over, so the model also remembers what it said.

Every happening is a typed event (`sbx.agent.core.events`) written to the
conversation's transcript and handed to each subscriber (the CLI's progress,
the service's event stream); a subscriber that raises is dropped, never the run.
An execution's live output goes to the subscribers alone, as `output_chunk`
events while the code runs; the transcript keeps the output in `tool_result`.

Cancellation (Ctrl-C, the run's `Cancellation` token fired by the face, or
`cancel()` from another thread) ends the run as `cancelled`, even while a
model request hangs: the gate marks the interrupted call `cancelled`, the
sandbox is removed (its interpreter may still be running the code), and the
next question gets a fresh sandbox and a note that earlier variables are gone.
A face with a store passes its `RunRecorder`: it hears each run start and end.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from sbx.agent.core.asking import PendingInput, PendingQuestion, answer_message
from sbx.agent.core.config import AppConfig
from sbx.agent.core.events import Event, EventSink, RunEnd, RunError, RunStart, output_chunks
from sbx.agent.core.loop import run
from sbx.agent.core.notes import notes_for
from sbx.agent.core.outcomes import RESET_NOTE as RESET_NOTE
from sbx.agent.core.outcomes import loss_text, reset_note
from sbx.agent.core.plan import last_plan
from sbx.agent.core.prompt import SystemPrompt, build_system_prompt
from sbx.agent.core.restore import (
    forgotten,
    held_cells,
    prior_cells,
    replace_killed,
    restore_note,
    restore_workspace,
)
from sbx.agent.core.restore_ready import RestoreReady
from sbx.agent.core.run_recorder import NoRecorder, RunRecorder, RunTicket, recorded, result_outcome
from sbx.agent.core.state import RunResult, SandboxUsage
from sbx.agent.core.transcript import Transcript
from sbx.agent.core.workspace import ConversationSpec as ConversationSpec
from sbx.agent.core.workspace import Workspace
from sbx.agent.model.cancellation import Cancellation, Cancelled
from sbx.agent.model.client import ModelClient, TokenUsage
from sbx.agent.provenance.data import data_digests
from sbx.sandbox.closing import Closing
from sbx.sandbox.errors import SandboxError
from sbx.sandbox.pool import Pool
from sbx.sandbox.units import format_size
from sbx.tools.audit import AuditError, AuditLog
from sbx.tools.builtin.ask_user import bounded_answer
from sbx.tools.gate import ToolGate

logger = logging.getLogger(__name__)

CANCEL_REASON = loss_text("cancel")
UNANSWERED = "[sbx] Not run: the run ended before this call was made ({status})."


def new_conversation_id() -> str:
    """A short unique id shared by the conversation's transcript, sandbox labels and audit."""
    return "conv-" + uuid.uuid4().hex[:12]


class Conversation(Closing):
    """Questions and answers over one sandbox session; `close()` removes the sandbox."""

    def __init__(
        self,
        *,
        spec: ConversationSpec,
        config: AppConfig,
        model: ModelClient,
        audit: AuditLog,
        transcript: Transcript,
        pool: Pool | None,
        image: str,
        ready: RestoreReady | None = None,
    ) -> None:
        self.id = spec.conversation_id or new_conversation_id()
        self.spec = spec
        self.config = config
        self.model = model
        self.image = image
        self.transcript = transcript
        self.workspace = Workspace(
            spec=replace(spec, conversation_id=self.id), config=config, audit=audit, pool=pool,
            image=image, ready=ready,
        )
        self.workspace.held_cells = partial(held_cells, transcript.path, config.restore)
        self._messages: list[dict[str, Any]] = []
        self._prompt: SystemPrompt | None = None
        self._sinks: list[EventSink] = []
        self._lock = threading.Lock()
        self._gate: ToolGate | None = None
        self._cancel: Cancellation | None = None
        self.runs: list[RunResult] = []
        """Every run's result, in order."""
        self.question = PendingQuestion()
        """The last run ended `needs_input`: `answer()` continues it (a new question drops it)."""

    # ------------------------------------------------------------ subscribers

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Send every later event to `sink`; returns the function that unsubscribes it."""
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink) if sink in self._sinks else None

    def emit(self, event: Event) -> None:
        """Record an event in the transcript, then hand it to every subscriber."""
        self.transcript.record(event)
        self._publish(event)

    def _publish(self, event: Event) -> None:
        """Hand an event to every subscriber (live output comes here from the tool's thread)."""
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:  # a broken display must not end the run
                logger.warning("an event subscriber failed and was removed", exc_info=True)
                if sink in self._sinks:
                    self._sinks.remove(sink)

    # ------------------------------------------------------------ questions

    def admit(self, text: str, recorder: RunRecorder, *, answering: bool = False) -> RunTicket:
        """The next run's ticket, admitted by `recorder` (it raises to refuse the run).

        `ask` (or, `answering`, `answer`) runs that same ticket later: a face that
        admits a run when it is posted and a run's ticket are one, built here. An
        answer first claims the pending question (`ValueError` when none waits or
        another answer has it), given back if the recorder refuses the run.
        """
        ticket = self._ticket(text, None, None, answering=answering)
        if answering:
            self.question.claim(ticket.run_id)
        try:
            recorder.admitted(ticket)
        except BaseException:
            self.question.unclaim(ticket.run_id)
            raise
        return ticket

    def ask(self, question: str, *, run_id: str | None = None,
            cancel: Cancellation | None = None, recorder: RunRecorder | None = None,
            ticket: RunTicket | None = None) -> RunResult:
        """Answer one question, continuing the conversation; one question at a time.

        A `RunResult` for every ending, Ctrl-C and a fired `cancel` included
        (`cancelled`); raises only for operator errors (sandbox, audit log), after a
        `run_error` event. `recorder` hears it start and end; `ticket` (from `admit`)
        gives the run's id and token instead of `run_id` and `cancel`.
        """
        with self._lock:
            self.question.set(None)
            return self._recorded(question, ticket or self._ticket(question, run_id, cancel),
                                  recorder, admitted=ticket is not None)

    def answer(self, answer: str, *, run_id: str | None = None,
               cancel: Cancellation | None = None, recorder: RunRecorder | None = None,
               ticket: RunTicket | None = None) -> RunResult:
        """Continue the run that ended `needs_input` with the user's answer: a new run.

        The same sandbox if alive, else a fresh one and the model is told (`RESET_NOTE`);
        the new run's records (`run_start`, audit `user_answer`) name the run it
        continues. `ValueError` when no run is waiting for an answer. `ticket` as in `ask`.
        """
        with self._lock:
            admitted = ticket is not None
            ticket = ticket or self._ticket(answer, run_id, cancel, answering=True)
            pending = self.question.take(ticket.run_id)  # unless another answer claimed it
            text = bounded_answer(answer)
            return self._recorded(answer_message(pending, text), ticket, recorder,
                                  admitted=admitted, continues=pending, answer=text)

    def _ticket(self, text: str, run_id: str | None, cancel: Cancellation | None, *,
                answering: bool = False) -> RunTicket:
        return self.workspace.ticket("question", run_id=run_id, cancel=cancel,
                                     question=bounded_answer(text) if answering else text)

    def _recorded(self, question: str, ticket: RunTicket, recorder: RunRecorder | None, *,
                  admitted: bool, continues: PendingInput | None = None,
                  answer: str | None = None) -> RunResult:
        """One run under the lock: its token, its recorder, its result kept.

        `admitted`: the ticket came from `admit` (the recorder has admitted it already).
        """
        token, run_id = ticket.cancel, ticket.run_id
        self._cancel = token

        def work() -> RunResult:
            try:
                return self._run(question, run_id, token, continues=continues, answer=answer)
            except (KeyboardInterrupt, Cancelled):  # outside the loop, which records its own
                return self._cancelled(run_id, token)

        try:
            with self.workspace.in_use():
                result = recorded(recorder or NoRecorder(), ticket, work, result_outcome,
                                  admitted=admitted)
        finally:
            self._cancel = None
        self.runs.append(result)
        return result

    def restore(
        self, messages: list[dict[str, Any]], pending: PendingInput | None, *, lost: bool,
        reason: str | None = None,
    ) -> None:
        """Take up a conversation from its record (a new process): its messages, its question.

        `lost`: code ran in the sandbox that is gone now, so the model is told `reason` (a
        restart's words; by default "the previous process ended").
        """
        with self._lock:
            self._messages = list(messages)
            self.question.set(pending)
            self.workspace.reset_pending = lost
            if lost:
                self.workspace.lost(
                    reason or loss_text("restart", "the previous process ended"),
                    cause="restart")

    def cancel(self) -> None:
        """Cancel the run in progress from another thread: its sandbox is removed."""
        if self._cancel is not None:
            self._cancel.cancel()
        else:
            self.workspace.discard(reason=CANCEL_REASON, cause="cancel")

    def reset(self) -> None:
        """Forget the messages and replace the sandbox: the next question starts afresh."""
        with self._lock:
            self.workspace.discard()
            self.workspace.forget_snapshot()
            self.workspace.forget_loss()  # a fresh start needs no note
            self._messages = []
            self.emit(forgotten())  # a later restore replays nothing from before

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as the model will next see it (a copy)."""
        return list(self._messages)

    def close(self) -> None:
        """Remove the sandbox, close the model client and the transcript (idempotent)."""
        try:
            self.workspace.close()
        finally:
            self.model.close()
            self.transcript.close()

    # ------------------------------------------------------------ internals

    def _run(
        self, question: str, run_id: str, cancel: Cancellation, *,
        continues: PendingInput | None = None, answer: str | None = None,
    ) -> RunResult:
        """Open the gate for one run, run the loop, settle the history, close the gate.

        The token cancels the gate's running call and removes the sandbox when it fires.
        """
        self.question.set(None)
        cancel.check()
        replace_killed(self.workspace, self.config.restore)
        live = LiveRelay(run_id, self._publish)
        gate = self.workspace.open_gate(
            run_id, continues=continues.run_id if continues else None, on_output=live
        )
        self._gate = gate
        unhook = cancel.on_cancel(lambda: self._stop(gate))
        reason = "error"
        try:
            prompt = self._system_prompt(gate)
            reset = self.workspace.take_reset() and bool(self._messages)
            cause = self.workspace.lost_cause
            lost = self.workspace.lost_reason() if reset else ""
            cells = prior_cells(self.transcript.path, self.config.restore, reset=reset)
            asked = f"{reset_note(lost)}\n\n{question}" if reset else question
            start = self._run_start(run_id, question, prompt, gate, reset=reset)
            if reset:
                start = start.model_copy(update={"reset_cause": cause, "reset_reason": lost})
            if continues is not None:
                start = start.model_copy(update={"continues": continues.run_id})
                gate.record_answer(continues=continues.run_id, question=continues.question,
                                   answer=answer or "")
            self.emit(start)
            if cells is not None:
                restored = restore_workspace(self.workspace, cells, self.config.restore,
                                             run_id=run_id, reason=lost, cause=cause)
                self.emit(restored.event)
                asked = f"{restore_note(restored.event)}\n\n{question}"
            result = run(
                asked, model=self.model, gate=gate, settings=self.config.settings,
                system_prompt=prompt.text, history=self._messages, emit=self.emit,
                cancel=cancel, spend=self.spec.spend, prior=restored.work if cells else None,
                **last_plan(self.runs, self._messages),
            )
            reason = result.status
            self._messages = settle(list(result.messages), result.status)
            if result.status == "needs_input" and result.question is not None:
                self.question.set(PendingInput(run_id=run_id, question=result.question))
        except (KeyboardInterrupt, Cancelled):
            reason = "cancelled"
            raise
        except (SandboxError, AuditError) as exc:
            self.emit(RunError(run_id=run_id, error=f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            unhook()
            live.close()
            if reason == "cancelled":
                gate.cancel()
                self.workspace.discard(reason=CANCEL_REASON, cause="cancel")
            self._gate = None
            gate.close(reason=reason)
        return result

    def _stop(self, gate: ToolGate) -> None:  # the token fired: the call ends, the sandbox goes
        gate.cancel()
        self.workspace.discard(reason=CANCEL_REASON, cause="cancel")

    def _system_prompt(self, gate: ToolGate) -> SystemPrompt:
        """Built once per conversation: later runs continue the messages it began."""
        if self._prompt is None or not self._messages:
            limits = self.config.limits
            self._prompt = build_system_prompt(
                data=self.spec.data, notes=notes_for(self.spec, self.config.policy),
                tools=gate.enabled_names(), timeout_s=limits.timeout,
                memory=format_size(limits.memory),
                tool_format=self.config.settings.tool_format,
                guard=gate.guard,
            )
            if self._prompt.redactions:
                gate.record_redactions("system_prompt", self._prompt.redactions)
        return self._prompt

    def _run_start(
        self, run_id: str, question: str, prompt: SystemPrompt, gate: ToolGate, *, reset: bool
    ) -> RunStart:
        settings = self.config.settings
        return RunStart(
            run_id=run_id,
            conversation_id=self.id,
            label=self.spec.label,
            question=question,
            model=self.model.model,
            base_url=self.model.base_url,
            prompt_version=prompt.version,
            policy_sha256=self.config.digest(),
            tools=gate.enabled_names(),
            budget=settings.budget.model_dump(),
            settings=settings.model_dump(exclude={"budget"}),
            data=[str(path) for path in self.spec.data],
            data_sha256=data_digests(self.spec.data),
            output_dir=str(self.workspace.output_dir(run_id)),
            image=self.image,
            principal=self.spec.principal,
            sandbox_reset=reset,
        )

    def _cancelled(self, run_id: str, cancel: Cancellation) -> RunResult:
        """The result of a run cancelled before or after the loop (which records its own)."""
        result = RunResult(
            run_id=run_id, status="cancelled", answer=None,
            message=cancel.reason, turns=0, tool_calls=0,
            usage=TokenUsage(), duration_s=0.0, artifacts=(), sandbox=SandboxUsage(),
            messages=tuple(self._messages),
        )
        self.emit(RunEnd.model_validate({"run_id": run_id, **result.as_dict()}))
        return result


class LiveRelay:
    """One run's live output as `output_chunk` events, to subscribers only, until it ends.

    Called from the thread that runs the execution; once the run has ended
    (an abandoned call's thread may still be printing) nothing more goes out.
    """

    def __init__(self, run_id: str, publish: Callable[[Event], None]) -> None:
        self.run_id = run_id
        self._publish = publish
        self._lock = threading.Lock()
        self._open = True

    def __call__(self, call_id: str, stream: str, text: str) -> None:
        """Publish one chunk of the execution of `call_id` (several events if it is long)."""
        with self._lock:
            if self._open:
                for event in output_chunks(self.run_id, call_id, stream, text):
                    self._publish(event)

    def close(self) -> None:
        """The run ended: drop whatever comes later."""
        with self._lock:
            self._open = False


def settle(messages: list[dict[str, Any]], status: str) -> list[dict[str, Any]]:
    """The history a follow-up continues: every tool call answered, as the API requires.

    A run that ended on a budget after the model asked for tools leaves calls
    without results; each gets a `tool` message saying it was not run.
    """
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        missing = [c for c in message.get("tool_calls") or [] if c.get("id") not in answered]
        messages.extend(
            {"role": "tool", "tool_call_id": call.get("id"),
             "content": UNANSWERED.format(status=status)}
            for call in missing
        )
        break
    return messages

