// The notes panel of one dataset: what people (or the model, on their word) noted about
// it. The next conversation on the file sees its notes, marked as notes, never as
// measurements; a note written about other content of the file is marked stale.

import { call } from "./api.js";
import { append, clear, el, formatTime } from "./dom.js";
import { $, guarded, say } from "./ui.js";

let current = null;  // the dataset whose notes are shown

/** Show the notes panel of `dataset` and read its notes. */
export async function showNotes(dataset) {
  current = dataset;
  $("notes-title").textContent = `Notes on ${dataset.name}`;
  $("notes").hidden = false;
  await refreshNotes();
  $("note-text").focus();
}

function notesPath(suffix = "") {
  return `/v1/datasets/${encodeURIComponent(current.id)}/notes${suffix}`;
}

async function refreshNotes() {
  const listing = await call("GET", notesPath());
  const list = clear($("note-list"));
  if (!listing.items.length) append(list, el("li", { class: "empty" }, "No notes yet."));
  for (const note of listing.items) append(list, noteItem(note));
}

function noteItem(note) {
  const who = note.by_model ? `${note.author} via the model` : note.author;
  const shared = note.team ? `, shared with team ${note.team}` : "";
  const text = el("p", { class: "note-text" }, note.text);
  const edit = el("button", { type: "button", class: "small", "aria-label": `Edit note ${note.id}` },
    "Edit");
  const remove = el("button", { type: "button", class: "small subtle",
    "aria-label": `Delete note ${note.id}` }, "Delete");
  const item = el("li", { class: "note", "data-note": note.id }, text,
    el("p", { class: "meta" }, `${who}, ${formatTime(note.updated_at)}${shared}`),
    note.stale ? el("p", { class: "note-stale" }, "Possibly stale: the file changed since.") : null,
    el("span", { class: "actions" }, edit, remove));
  edit.addEventListener("click", () => editInPlace(item, note));
  remove.addEventListener("click", () => guarded("notes-status", async () => {
    await call("DELETE", notesPath(`/${encodeURIComponent(note.id)}`));
    say("notes-status", "Note deleted.");
    await refreshNotes();
  }));
  return item;
}

function editInPlace(item, note) {
  const field = el("textarea", { rows: "2", "aria-label": `New text of note ${note.id}` });
  field.value = note.text;
  const save = el("button", { type: "submit", class: "small" }, "Save note");
  const form = el("form", { class: "note-edit" }, field, save);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    guarded("notes-status", async () => {
      await call("PATCH", notesPath(`/${encodeURIComponent(note.id)}`), { text: field.value });
      say("notes-status", "Note saved.");
      await refreshNotes();
    });
  });
  item.replaceChildren(form);
  field.focus();
}

/** Wire the panel's form and close button (once, when the page starts). */
export function setUpNotes() {
  $("note-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("note-text").value.trim();
    if (!text || current === null) return;
    guarded("notes-status", async () => {
      await call("POST", notesPath(), { text });
      $("note-text").value = "";
      say("notes-status", "Note added: the next conversation on this file sees it.");
      await refreshNotes();
    });
  });
  $("notes-close").addEventListener("click", () => { $("notes").hidden = true; });
}
