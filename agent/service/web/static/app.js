// The sbx web page: sign in, datasets, conversations, questions and their runs live.
//
// Everything goes through the same HTTP API as the curl examples (api.js); a
// run's steps arrive as Server-Sent Events (EventSource resumes with
// Last-Event-ID by itself) and are drawn by RunView (run.js).

import { call, setCsrf } from "./api.js";
import { datasetName, refreshDatasets, refreshUsage, setUpDropZone } from "./datasets.js";
import { append, clear, el, formatTime, setText } from "./dom.js";
import { setUpNotes } from "./notes.js";
import { RunView } from "./run.js";
import { $, guarded, say, state, whenSessionEnds } from "./ui.js";

const EVENT_TYPES = ["run_start", "message", "model_waiting", "model_reply", "output_chunk",
  "tool_result", "plan", "compaction", "run_end", "run_error", "state_restored"];
const TERMINAL = new Set(["run_end", "run_error"]);
const UNFINISHED = new Set(["queued", "running"]);
const OPEN_HASH = /^#(conv-[A-Za-z0-9]{1,40})$/;  // the URL's note of the open conversation

// ---------------------------------------------------------------- sign in and out

async function start() {
  const session = await call("GET", "/web/session");
  if (session.signed_in) signedIn(session);
  else signedOut("");
}

function signedIn(session) {
  state.principal = session.principal;
  setCsrf(session.csrf_token);
  setText($("principal"), session.principal);
  $("signin").hidden = true;
  $("who").hidden = false;
  $("workspace").hidden = false;
  refreshAll();
  const open = OPEN_HASH.exec(location.hash);  // a reload lands on the open conversation
  if (open) guarded("ask-status", () => openConversation(open[1]));
  $("question").focus();
}

function signedOut(message) {
  stopStream();
  setCsrf(null);
  Object.assign(state, { principal: null, conversation: null, activeRun: null, datasets: [] });
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  state.selected.clear();
  $("workspace").hidden = true;
  $("who").hidden = true;
  $("signin").hidden = false;
  say("signin-status", message, message ? "error" : "info");
  $("key").focus();
}

async function signIn(event) {
  event.preventDefault();
  const key = $("key").value.trim();
  if (!key) return say("signin-status", "Enter your API key.", "error");
  try {
    const session = await call("POST", "/web/session", { key });
    $("key").value = "";
    say("signin-status", "");
    signedIn(session);
  } catch (error) {
    say("signin-status", error.message, "error");
  }
}

async function signOut() {
  await guarded("ask-status", async () => {
    await call("DELETE", "/web/session");
    signedOut("Signed out.");
  });
}

// ---------------------------------------------------------------- lists

function refreshAll() {
  guarded("data-status", refreshDatasets);
  guarded("ask-status", refreshConversations);
  guarded("ask-status", refreshUsage);
}

async function refreshConversations() {
  const listing = await call("GET", "/v1/conversations");
  const list = clear($("conversation-list"));
  if (!listing.items.length) append(list, el("li", { class: "empty" }, "No conversations yet."));
  for (const conversation of listing.items) {
    const names = conversation.datasets.map((id) => datasetName(id)).join(", ") || "no data";
    const button = el("button", { type: "button", class: "link" },
      `${formatTime(conversation.created_at)} · ${names}`);
    if (state.conversation?.id === conversation.id) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => guarded("ask-status", () => openConversation(conversation.id)));
    append(list, el("li", { class: `conversation status-${conversation.status}` }, button,
      el("span", { class: "meta" }, conversation.status)));
  }
}

// ---------------------------------------------------------------- conversations and runs

function showConversation(conversation) {
  state.conversation = conversation;
  const hash = conversation ? `#${encodeURIComponent(conversation.id)}` : "";
  if (location.hash !== hash) history.replaceState(null, "", location.pathname + location.search + hash);
  const names = conversation ? conversation.datasets.map(datasetName).join(", ") : "";
  $("conversation-title").textContent = conversation ? `Conversation ${conversation.id}` : "New conversation";
  const limits = Object.entries(conversation?.limits ?? {}).map(([k, v]) => `${k} ${v}`).join(", ");
  setText($("conversation-data"), conversation
    ? `Data: ${names || "none"} · ${conversation.status}${limits ? ` · limits: ${limits}` : ""}`
    : "Choose datasets on the left, then ask a question.");
  $("limits").hidden = conversation !== null;
  const base = conversation ? `/v1/conversations/${encodeURIComponent(conversation.id)}` : null;
  for (const [id, href] of [["export-ipynb", `${base}/export?format=ipynb`],
    ["export-py", `${base}/export?format=py`], ["export-md", `${base}/export?format=md`],
    ["export-transcript", `${base}/transcript`]]) {
    $(id).setAttribute("href", href ?? "#");
  }
  $("exports").hidden = conversation === null;
  $("close-conversation").hidden = conversation === null || conversation.status !== "active";
  const closed = conversation !== null && conversation.status !== "active";
  $("question").disabled = closed;
  $("ask").disabled = closed;
  if (closed) say("ask-status", `This conversation is ${conversation.status}; start a new one to ask.`);
  for (const box of document.querySelectorAll("#dataset-list input[type=checkbox]")) {
    box.disabled = conversation !== null;
  }
}

function newConversation() {
  stopStream();
  state.generation += 1;
  clear($("runs"));
  state.views = [];
  showConversation(null);
  say("ask-status", "");
  guarded("ask-status", refreshDatasets);
  $("question").focus();
}

/**
 * Show a conversation and its runs. Another opening may start while this one waits
 * on the server (a reload opens the conversation in the address, and the user clicks
 * it too): after each wait, only the latest opening touches the page.
 */
async function openConversation(id) {
  stopStream();
  const generation = ++state.generation;
  const current = () => generation === state.generation;
  const conversation = await call("GET", `/v1/conversations/${encodeURIComponent(id)}`);
  if (!current()) return;
  clear($("runs"));
  state.views = [];
  showConversation(conversation);
  say("ask-status", "");
  await refreshConversations();
  for (const runId of conversation.runs) {
    if (!current()) return;
    const run = await call("GET", `/v1/runs/${encodeURIComponent(runId)}`);
    if (!current()) return;
    const view = track(new RunView(runId, run.question));
    append($("runs"), view.root);
    await follow(view, generation);
  }
}

/**
 * Keep the views of the conversation's runs: only the latest run's question to the
 * user can be answered, so a new run retires the older runs' answer fields.
 */
function track(view) {
  for (const older of state.views ?? []) older.retireAskBox();
  state.views = [...(state.views ?? []), view];
  view.onAnswer = (text) => answerRun(text);
  return view;
}

async function closeConversation() {
  const conversation = state.conversation;
  if (!conversation) return;
  await call("DELETE", `/v1/conversations/${encodeURIComponent(conversation.id)}`);
  say("ask-status", "Conversation closed; its sandbox was removed.");
  newConversation();
  await refreshConversations();
  await refreshUsage();
}

/**
 * Ask the open conversation (a new one if none is open) and follow the run.
 *
 * The user may open another conversation while the question is on its way: the run
 * then belongs to the conversation it was asked in, listed there, and this page
 * stays on the one the user opened (only the latest opening touches the page).
 */
async function ask(event) {
  event?.preventDefault();
  const question = $("question").value.trim();
  if (question && state.activeRun) {  // cleared as the run ends (`setActive`)
    return say("ask-status", "The run is going; ask again once it has ended, or cancel it.");
  }
  if (!question || state.asking) return;
  await guarded("ask-status", async () => {
    let generation = state.generation;
    let accepted;
    state.asking = true;  // until the server has the question: its run then is the active one
    try {
      if (state.conversation === null) {
        const created = await call("POST", "/v1/conversations",
          { datasets: [...state.selected], ...chosenLimits() });
        if (generation !== state.generation) return refreshConversations();
        showConversation(created);
        generation = ++state.generation;
      }
      accepted = await call("POST",
        `/v1/conversations/${encodeURIComponent(state.conversation.id)}/questions`, { question });
    } finally {
      state.asking = false;
    }
    if (generation !== state.generation) return refreshConversations();
    $("question").value = "";
    await show(accepted, question, "You asked", generation);
  });
}

/** The limits chosen for a new conversation (the server refuses any above the policy). */
function chosenLimits() {
  const limits = {};
  for (const [name, id] of [["timeout", "limit-timeout"], ["memory", "limit-memory"],
    ["runtime", "limit-runtime"]]) {
    const value = $(id).value.trim();
    if (value) limits[name] = value;
  }
  return Object.keys(limits).length ? { limits } : {};
}

/** Answer the question the last run asked (it ended needs_input): a new run continues. */
async function answerRun(text) {
  if (state.activeRun || state.conversation === null) return;
  const generation = state.generation;
  await guarded("ask-status", async () => {
    const accepted = await call("POST",
      `/v1/conversations/${encodeURIComponent(state.conversation.id)}/answer`, { answer: text });
    if (generation !== state.generation) return refreshConversations();  // see `ask`
    await show(accepted, text, "You answered", generation);
  });
}

/** Show a run just accepted and follow it to its end. */
async function show(accepted, text, who, generation) {
  say("ask-status", "");
  const view = track(new RunView(accepted.run_id, text, who));
  append($("runs"), view.root);
  view.root.scrollIntoView({ block: "start" });
  refreshConversations();
  await follow(view, generation);
  await refreshUsage();
}

/**
 * Stream a run's events into its view until it ends (resolves then).
 *
 * The server closes the stream once the run's final status is stored, together
 * with its files; EventSource then reports an error (and would reconnect with
 * Last-Event-ID, which is how a dropped connection resumes). So on each error the
 * run is read: ended, its files are shown and the stream is closed for good.
 */
function follow(view, generation) {
  return new Promise((resolve) => {
    if (generation !== state.generation) return resolve();
    const source = new EventSource(`/v1/runs/${encodeURIComponent(view.runId)}/events`);
    state.source = source;
    setActive(view.runId);
    const done = () => {
      source.close();
      if (state.source === source) state.source = null;
      setActive(null);
      resolve();
    };
    const onEvent = (message) => {
      let data;
      try {
        data = JSON.parse(message.data);
      } catch {
        return;
      }
      view.handle(data);
      if (TERMINAL.has(data.type)) $("cancel").hidden = true;
    };
    for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
    source.addEventListener("error", async () => {
      try {
        const run = await call("GET", `/v1/runs/${encodeURIComponent(view.runId)}`);
        if (!UNFINISHED.has(run.status)) {
          view.lost(run);
          view.finalize(run);
          done();
        } else if (source.readyState === EventSource.CLOSED) {
          say("ask-status", "The event stream was refused; reload the page to follow the run.", "error");
          done();
        }
      } catch {
        done();
      }
    });
    source.addEventListener("close-view", done);
  });
}

function stopStream() {
  if (state.source) {
    state.source.dispatchEvent(new Event("close-view"));
    state.source = null;
  }
  setActive(null);
}

function setActive(runId) {
  state.activeRun = runId;
  $("cancel").hidden = runId === null;
  $("ask").disabled = runId !== null || (state.conversation !== null && state.conversation.status !== "active");
  if (runId) say("ask-status", "The run is going; its steps appear below as they happen.");
  else if (/^(The run is going|Cancelling)/.test($("ask-status").textContent)) say("ask-status", "");
}

async function cancelRun() {
  const runId = state.activeRun;
  if (!runId) return;
  await guarded("ask-status", async () => {
    await call("POST", `/v1/runs/${encodeURIComponent(runId)}/cancel`);
    if (state.activeRun === runId) say("ask-status", "Cancelling…");  // cleared when it ends
  });
}

// ---------------------------------------------------------------- wiring

function wire() {
  $("signin-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      ask();
    }
  });
  $("cancel").addEventListener("click", cancelRun);
  $("new-conversation").addEventListener("click", newConversation);
  $("close-conversation").addEventListener("click", () => guarded("ask-status", closeConversation));
  $("preview-close").addEventListener("click", () => { $("preview").hidden = true; });
  setUpDropZone();
  setUpNotes();
}

whenSessionEnds(signedOut);
wire();
start().catch((error) => say("signin-status", error.message, "error"));
