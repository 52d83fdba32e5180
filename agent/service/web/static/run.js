// One run on the page: its question, each step as it happens, then the answer.
//
// RunView.handle(event) takes the run's events in order, as the server streams
// them (run_start, model_waiting, model_reply, output_chunk, tool_result, plan, compaction,
// run_end, run_error, state_restored); an event type it does not know is ignored,
// and so are `message` events: what the harness tells the model (chart
// descriptions, notes) is written for the model, and the page shows the charts
// and tables themselves. The plan is shown once, as the checklist, and the
// model's question once, above the answer field: the update_plan and ask_user
// calls that carry them are not drawn as steps. Everything
// shown is built with el() from dom.js: model text, code, output and names are
// text, never markup. A run that ended needs_input (the model asked with
// ask_user) shows the question and a field to answer it; `onAnswer(text)`, set
// by the page, continues the conversation with the answer.

import { el, append, clear, encodePath, formatSize, setText } from "./dom.js";
import { highlight } from "./highlight.js";
import { renderMarkdown } from "./markdown.js";
import { PlanView } from "./plan.js";
import { resultTable, splitOutput } from "./tables.js";

const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
// Calls whose words the page shows in their own place, not as steps: the plan as the
// checklist (plan.js), the model's question to the user above the answer field. A refused
// one is a step after all.
const SHOWN_ELSEWHERE = new Set(["update_plan", "ask_user"]);
const FAILED = new Set(["model_error", "error"]);  // endings shown as errors, not notes
const MAX_LIVE_CHARS = 200000;  // live stdout kept on the page per step (the head, like the server)

function artifactUrl(runId, name) {
  return `/v1/runs/${encodeURIComponent(runId)}/artifacts/${encodePath(name)}`;
}

function codeOf(call) {
  try {
    const args = JSON.parse(call.function?.arguments ?? "{}");
    if (typeof args.code === "string") return { code: args.code, args };
    return { code: null, args };
  } catch {
    return { code: null, args: call.function?.arguments ?? "" };
  }
}

const PART_TITLES = [["measured", "Measured"], ["interpretation", "Interpretation"],
  ["assumptions", "Assumptions"]];

/**
 * The answer in its parts: what the code measured, apart from interpretation and
 * assumptions, each under its own title. An answer without parts is shown whole,
 * marked as unmarked (nothing in it says which sentence is which kind).
 */
function answerParts(event) {
  const parts = event.parts;
  if (!parts || typeof parts !== "object") return renderMarkdown(event.answer);
  if (parts.unmarked) {
    return [renderMarkdown(event.answer), el("p", { class: "parts-unmarked" },
      "Unmarked: this answer does not separate what was measured from interpretation.")];
  }
  const sections = PART_TITLES.filter(([key]) => parts[key]).map(([key, title]) => {
    const text = renderMarkdown(parts[key]);
    text.classList.remove("answer-text");  // the answer's text is the one box around the parts
    return el("section", { class: `answer-part part-${key}`, "aria-label": title },
      el("h4", {}, title), text);
  });
  return el("div", { class: "answer-text answer-parts" }, sections);
}

/** The [notes] and [resources] lines of an observation (the server's resource notes). */
export function resourceNotes(content) {
  const notes = [];
  let resources = null;
  let inNotes = false;
  for (const line of String(content ?? "").split("\n")) {
    if (line.startsWith("[resources]")) resources = line.slice("[resources]".length).trim();
    if (/^\[[a-z]+\]/.test(line)) inNotes = line === "[notes]";
    else if (inNotes && line.startsWith("- ")) notes.push(line.slice(2));
  }
  return { notes, resources };
}

/**
 * sbx's own words for people who have no command line: an observation's notes name the
 * flag that changes a limit (`or --timeout`, `(--max-time)`), which the page's reader
 * cannot use; the policy's setting, also named, stays.
 */
export function withoutFlags(text) {
  return String(text ?? "")
    .replace(/,? or --[a-z][a-z0-9-]*/g, "")
    .replace(/, --[a-z][a-z0-9-]*(?=\))/g, "")
    .replace(/ ?\(--[a-z][a-z0-9-]*\)/g, "");
}

/** stdout as text blocks and tables. */
function outputNode(text, label) {
  const box = el("div", { class: `output output-${label}` });
  append(box, el("p", { class: "output-label" }, label));
  for (const part of label === "stdout" ? splitOutput(text) : [{ kind: "text", text }]) {
    if (part.kind === "text") {
      append(box, el("pre", { class: "stream", tabindex: "0" }, part.text));
      continue;
    }
    const table = el("table", { class: "frame" });
    append(table, el("thead", {}, el("tr", {}, part.header.map((cell) => el("th", { scope: "col" }, cell)))));
    append(table, el("tbody", {}, part.rows.map((row) => el("tr", {}, row.map((cell, i) => (
      i === 0 ? el("th", { scope: "row" }, cell) : el("td", {}, cell)))))));
    append(box, el("div", { class: "table-wrap", tabindex: "0", role: "region",
      "aria-label": "table from the output" }, table));
  }
  return box;
}

export class RunView {
  constructor(runId, question, who = "You asked") {
    this.runId = runId;
    this.onAnswer = null;
    this.steps = new Map();
    this.heldCalls = new Map();  // calls SHOWN_ELSEWHERE: a step only if refused
    this.files = [];
    this.count = 0;
    this.ended = false;
    this.status = el("p", { class: "run-status", role: "status" }, "Queued…");
    this.stepList = el("ol", { class: "steps" });
    this.question = el("p", { class: "question-text" }, question ?? "");
    this.who = el("span", { class: "who" }, who);
    this.plan = new PlanView();
    this.root = el("li", { class: "run", "data-run-id": runId },
      el("div", { class: "question" }, this.who, this.question),
      this.plan.root, this.stepList, this.status);
  }

  /** Show one event of the run. */
  handle(event) {
    const handler = {
      run_start: () => this.started(event),
      model_waiting: () => this.waiting(event),
      model_reply: () => this.reply(event),
      output_chunk: () => this.chunk(event),
      tool_result: () => this.result(event),
      plan: () => this.plan.update(event),
      compaction: () => this.note("Older outputs were shortened to keep the model's context small."),
      run_end: () => this.end(event),
      run_error: () => this.error(event),
      state_restored: () => this.restored(event),
    }[event.type];
    if (event.type !== "model_waiting" && this.waitingShown) this.doneWaiting();
    if (handler) handler();
  }

  /** The model is slow, not gone: which model, how long so far, and any retries. */
  waiting(event) {
    if (this.ended) return;
    const seconds = Math.max(0, Math.round(Number(event.elapsed_s) || 0));
    const retries = Number.isInteger(event.retries) ? event.retries : 0;
    let line = `Waiting for the model (${String(event.model ?? "")}): ${seconds} s`;
    if (retries) {
      const why = event.retry_reason ? ` after ${String(event.retry_reason)}` : "";
      line += `, tried again ${retries === 1 ? "once" : `${retries} times`}${why}`;
    }
    this.status.textContent = `${line}…`;
    this.waitingShown = true;
  }

  doneWaiting() {
    this.waitingShown = false;
    if (!this.ended) this.status.textContent = "Running…";
  }

  started(event) {
    if (event.continues) setText(this.who, "You answered");  // its question: the answer
    else setText(this.question, event.question ?? "");
    this.status.textContent = "Running…";
    if (event.sandbox_reset) {  // the reason is the core's words (the one vocabulary)
      const why = event.reset_reason ? ` (${String(event.reset_reason)})` : "";
      this.resetNote = this.note(
        `The sandbox was started again${why}: variables from earlier questions are gone.`);
    }
  }

  /** The sandbox's state rebuilt (a snapshot, replayed code): what came back, what differs. */
  restored(event) {
    if (this.resetNote) this.resetNote.remove();
    const text = (value) => String(value ?? "");
    const count = Number.isInteger(event.replayed) ? event.replayed : 0;
    const held = Number.isInteger(event.from_snapshot) ? event.from_snapshot : 0;
    const how = held ? `restored ${cells(held)} from a snapshot and re-ran ${count}`
      : `restored ${cells(count)}`;
    const differed = Array.isArray(event.differed) ? event.differed : [];
    const failed = Array.isArray(event.failed) ? event.failed : [];
    const names = Array.isArray(event.variables) ? event.variables.map(text) : [];
    let line = event.status === "not_restored"
      ? `The sandbox was started again; state not restored (${text(event.reason)}).`
      : `The sandbox was started again; state restored: ${how} (${text(event.reason)}).`;
    if (differed.length || failed.length) {
      line += ` ${differed.length} ${differed.length === 1 ? "differs" : "differ"}, ${failed.length} could not be restored.`;
    }
    if (names.length) line += ` These variables may differ: ${names.join(", ")}.`;
    const node = el("li", { class: "note restored", "data-status": text(event.status) }, line);
    const details = [...differed, ...failed].map((item) => el("li", {},
      `${text(item?.call_id)}: ${text(item?.detail)}`));
    if (details.length) append(node, el("ul", { class: "restored-cells" }, details));
    append(this.stepList, node);
  }

  note(text) {
    const node = el("li", { class: "note" }, text);
    append(this.stepList, node);
    return node;
  }

  reply(event) {
    const message = event.message ?? {};
    const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
    if (!calls.length) return;  // the answer: shown by run_end with its provenance
    if (message.content) append(this.stepList, el("li", { class: "thought" }, message.content));
    for (const toolCall of calls) {
      if (SHOWN_ELSEWHERE.has(toolCall.function?.name)) this.heldCalls.set(toolCall.id, toolCall);
      else this.newStep(toolCall);
    }
  }

  newStep(toolCall) {
    this.count += 1;
    const name = toolCall.function?.name ?? "tool";
    const { code, args } = codeOf(toolCall);
    const title = el("h3", {}, `Step ${this.count} · ${name}`);
    const state = el("span", { class: "step-state" }, "running…");
    const body = code !== null
      ? el("pre", { class: "code", tabindex: "0" }, highlight(code))
      : el("pre", { class: "args", tabindex: "0" }, JSON.stringify(args, null, 2));
    const live = el("pre", { class: "stream live", hidden: true, "aria-label": "live output" });
    const outcome = el("div", { class: "outcome" });
    const node = el("li", { class: "step running", "data-call-id": toolCall.id ?? "" },
      el("div", { class: "step-head" }, title, state), body, live, outcome);
    this.steps.set(toolCall.id, { node, state, live, outcome, chars: 0 });
    append(this.stepList, node);
    this.status.textContent = `Running step ${this.count}…`;
  }

  chunk(event) {
    const step = this.steps.get(event.call_id);
    if (!step || typeof event.text !== "string" || step.chars >= MAX_LIVE_CHARS) return;
    const text = event.text.slice(0, MAX_LIVE_CHARS - step.chars);
    step.chars += text.length;
    step.live.hidden = false;
    append(step.live, event.stream === "stderr" ? el("span", { class: "live-stderr" }, text) : text);
  }

  result(event) {
    let step = this.steps.get(event.call_id);
    if (!step && SHOWN_ELSEWHERE.has(event.name) && !event.failed) return;
    if (!step) {  // a refused call of those is a step after all, with what the model sent
      this.newStep(this.heldCalls.get(event.call_id)
        ?? { id: event.call_id, function: { name: event.name, arguments: "{}" } });
      step = this.steps.get(event.call_id);
    }
    const { node, state, live, outcome } = step;
    const execution = event.execution;
    if (execution?.stdout || execution?.stderr || !step.chars) {
      clear(live);  // the kept output replaces the live one
      live.hidden = true;
    }  // else (stopped, cancelled): the output the user was watching stays
    node.classList.remove("running");
    node.classList.add(event.failed ? "failed" : "succeeded");
    const word = String(event.outcome || (event.failed ? "failed" : "ok"));  // the core's word
    state.textContent = event.failed ? word : `done in ${Number(event.duration_s ?? 0).toFixed(2)} s`;
    if (execution) this.execution(outcome, execution);
    else if (event.failed) {  // sbx's words: no flags; a tool's output below stays as it came
      append(outcome, el("pre", { class: "stream error-text", tabindex: "0" }, withoutFlags(event.content)));
    } else append(outcome, el("pre", { class: "stream", tabindex: "0" }, event.content ?? ""));
    for (const name of event.artifacts ?? []) this.artifact(outcome, name);
    const { notes, resources } = resourceNotes(event.content);
    if (notes.length) {
      append(outcome, el("ul", { class: "notes" }, notes.map((n) => el("li", {}, withoutFlags(n)))));
    }
    if (resources) append(outcome, el("p", { class: "resources" }, `Resources: ${resources}`));
  }

  execution(outcome, execution) {
    const tables = Array.isArray(execution.tables) ? execution.tables.slice(0, 4) : [];
    let stdout = execution.stdout ?? "";
    for (const table of tables) {  // a DataFrame value printed last: its table replaces the text
      const printed = typeof table.text === "string" ? `${table.text}\n` : null;
      if (printed && stdout.endsWith(printed)) stdout = stdout.slice(0, stdout.length - printed.length);
    }
    if (stdout) append(outcome, outputNode(stdout, "stdout"));
    for (const table of tables) append(outcome, resultTable(table));
    if (execution.stderr) append(outcome, outputNode(execution.stderr, "stderr"));
    if (execution.error_type || execution.timed_out || execution.oom_killed) {
      const headline = execution.timed_out ? "Timed out: the execution ran past its time limit."
        : execution.oom_killed ? "Killed: the execution ran out of memory."
          : `${execution.error_type}: ${execution.error_message ?? ""}`;
      append(outcome, el("div", { class: "error", role: "note" },
        el("p", { class: "error-headline" }, headline),
        execution.traceback ? el("pre", { class: "traceback", tabindex: "0" }, execution.traceback) : null));
    }
  }

  artifact(outcome, name) {
    const { link, waiting, item } = this.fileLink(name, `Download ${name}`);
    if (IMAGE.test(name)) {
      item.image = el("img", { alt: `Chart ${name}` });
      append(outcome, el("figure", { class: "chart" }, item.image, el("figcaption", {}, link, waiting)));
    } else {
      append(outcome, el("p", { class: "artifact" }, link, waiting));
    }
  }

  /**
   * A link to one of the run's files. The server lists a run's files once the run has
   * ended (`finalize`): until then the link has no target and says so.
   */
  fileLink(name, text) {
    const base = String(name).split("/").pop();
    const link = el("a", { download: base, class: "artifact-link" }, text);
    const waiting = el("span", { class: "meta" }, " (ready when the run ends)");
    const item = { name, link, waiting, image: null };
    this.files.push(item);
    return { link, waiting, item };
  }

  /** The run has ended and its files are stored: point the links and images at them. */
  finalize(run) {
    const stored = new Map((run?.artifacts ?? []).map((artifact) => [artifact.name, artifact]));
    for (const item of this.files.splice(0)) {
      const artifact = stored.get(item.name);
      if (!artifact) {
        item.waiting.textContent = " (not kept)";
        continue;
      }
      const url = artifactUrl(this.runId, artifact.name);
      item.waiting.remove();
      item.link.setAttribute("href", url);
      if (item.image) item.image.setAttribute("src", url);
    }
  }

  end(event) {
    this.ended = true;
    this.finishSteps();
    const status = event.status ?? "ended";
    this.root.classList.add(`run-${status}`);
    if (event.answer) append(this.root, this.answer(event));
    else if (status === "needs_input" && typeof event.question === "string") {
      append(this.root, this.askBox(event.question));
    } else if (FAILED.has(status)) {
      append(this.root, el("p", { class: "run-message error-text", role: "alert" },
        event.message || status));
    } else append(this.root, el("p", { class: "run-message", role: "note" }, event.message ?? status));
    setText(this.status, summary(event));
  }

  /** The model's question to the user (ask_user) and the field that answers it. */
  askBox(question) {
    const field = el("textarea", { id: `answer-${this.runId}`, class: "answer-input", rows: "2" });
    const form = el("form", { class: "answer-form" },
      el("label", { for: field.id }, "Your answer"), field,
      el("button", { type: "submit", class: "answer-send" }, "Send answer"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = field.value.trim();
      if (text && this.onAnswer) this.onAnswer(text);
    });
    return el("section", { class: "ask-user", "aria-label": "The model asks you" },
      el("p", { class: "ask-user-question" }, el("span", { class: "who" }, "sbx asks"), question),
      form);
  }

  /** The question was answered (or another question asked): its field goes, it stays. */
  retireAskBox() {
    for (const form of this.root.querySelectorAll(".ask-user form")) form.remove();
  }

  answer(event) {
    const box = el("section", { class: "answer", "aria-label": "Answer" },
      el("h3", {}, "Answer"), answerParts(event),
      PlanView.pendingNote(event));
    if ((event.mislabelled ?? []).length) {
      append(box, el("p", { class: "provenance mislabelled" },
        "⚠ Interpretation presented as measured: ",
        event.mislabelled.map((sentence) => `“${sentence}” `)));
    }
    if (event.verified === true && (event.sources ?? []).length) {  // no number: no claim
      append(box, el("p", { class: "provenance verified" },
        "✓ Verified: every number in the answer was printed by the code."));
    } else if (event.verified === false) {
      append(box, el("p", { class: "provenance unverified" },
        `⚠ Not verified: ${(event.unsupported ?? []).length} number(s) were not printed by any output.`));
    }
    if ((event.unsupported ?? []).length) {
      append(box, el("p", { class: "unsupported" }, "Unsupported: ", event.unsupported.join(", ")));
    }
    if ((event.sources ?? []).length) {
      append(box, el("details", { class: "sources" },
        el("summary", {}, `Sources (${event.sources.length})`),
        el("ul", {}, event.sources.map((source) => el("li", {},
          el("strong", {}, source.number ?? ""),
          ` — execution ${source.execution ?? "?"}, line ${source.line ?? "?"}: `,
          el("code", {}, source.text ?? ""))))));
    }
    const files = event.artifacts ?? [];
    if (files.length) {
      append(box, el("p", { class: "files" }, "Files: ", files.map((name) => {
        const { link, waiting } = this.fileLink(name, name);
        return el("span", {}, link, waiting);
      })));
    }
    return box;
  }

  error(event) {
    this.ended = true;
    this.finishSteps();
    this.root.classList.add("run-error");
    append(this.root, el("p", { class: "run-message error-text", role: "alert" },
      `The run stopped: ${event.error ?? "an error"}`));
    this.status.textContent = "Stopped by an error.";
  }

  /** The run ended without a terminal event (its replica died): say so, in the core's word. */
  lost(run) {
    if (this.ended) return;
    this.ended = true;
    this.finishSteps();
    const word = run?.outcome || run?.status || "ended";
    append(this.root, el("p", { class: "run-message", role: "note" },
      `The run ended: ${word}: ${run?.message ?? ""}`));
    setText(this.status, word);
  }

  finishSteps() {
    for (const { node, state } of this.steps.values()) {
      if (node.classList.contains("running")) {
        node.classList.remove("running");
        state.textContent = "not finished";
      }
    }
  }
}

/** "1 cell", "3 cells". */
function cells(count) {
  return `${count} ${count === 1 ? "cell" : "cells"}`;
}

function summary(event) {
  const word = event.outcome ?? event.status ?? "ended";  // the core's word for the ending
  const parts = [`${word} in ${Number(event.duration_s ?? 0).toFixed(1)} s`];
  const sandbox = event.sandbox ?? {};
  if (sandbox.executions) parts.push(`${sandbox.executions} execution(s)`);
  if (sandbox.cpu_seconds) parts.push(`${Number(sandbox.cpu_seconds).toFixed(2)} CPU s`);
  if (sandbox.peak_memory_bytes) parts.push(`peak memory ${formatSize(sandbox.peak_memory_bytes)}`);
  if (event.usage?.total_tokens) parts.push(`${event.usage.total_tokens} tokens`);
  return parts.join(" · ");
}
