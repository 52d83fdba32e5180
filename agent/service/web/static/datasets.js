// The datasets panel (upload by drop or picker with progress, preview, delete) and the quota.

import { call, upload } from "./api.js";
import { append, clear, el, formatMoment, formatMoney, formatSize, setText } from "./dom.js";
import { showNotes } from "./notes.js";
import { $, guarded, say, state } from "./ui.js";

/** Read and list the caller's datasets, each with its checkbox, preview and delete. */
export async function refreshDatasets() {
  const listing = await call("GET", "/v1/datasets");
  state.datasets = listing.items;
  const list = clear($("dataset-list"));
  if (!listing.items.length) append(list, el("li", { class: "empty" }, "No datasets yet."));
  for (const dataset of listing.items) {
    const box = el("input", { type: "checkbox", id: `use-${dataset.id}`, value: dataset.id });
    box.checked = state.selected.has(dataset.id);
    box.disabled = state.conversation !== null;
    box.addEventListener("change", () => {
      if (box.checked) state.selected.add(dataset.id);
      else state.selected.delete(dataset.id);
    });
    const preview = el("button", { type: "button", class: "small" }, "Preview");
    preview.addEventListener("click", () => guarded("data-status", () => showPreview(dataset)));
    const notes = el("button", { type: "button", class: "small", "aria-label":
      `Notes on ${dataset.name}` }, "Notes");
    notes.addEventListener("click", () => guarded("data-status", () => showNotes(dataset)));
    const remove = el("button", { type: "button", class: "small subtle" }, "Delete");
    remove.setAttribute("aria-label", `Delete ${dataset.name}`);
    preview.setAttribute("aria-label", `Preview ${dataset.name}`);
    remove.addEventListener("click", () => guarded("data-status", () => deleteDataset(dataset)));
    append(list, el("li", { class: "dataset" },
      el("label", { for: box.id }, box, el("span", { class: "name" }, dataset.name),
        el("span", { class: "meta" }, formatSize(dataset.size))),
      el("span", { class: "actions" }, preview, notes, remove)));
  }
}

async function showPreview(dataset) {
  const full = await call("GET", `/v1/datasets/${encodeURIComponent(dataset.id)}`);
  setText($("preview-title"), `Preview of ${full.name}`);
  setText($("preview-text"), full.preview ?? "");
  $("preview").hidden = false;
  $("preview-text").focus();
}

async function deleteDataset(dataset) {
  await call("DELETE", `/v1/datasets/${encodeURIComponent(dataset.id)}`);
  state.selected.delete(dataset.id);
  say("data-status", `Deleted ${dataset.name}.`);
  await refreshDatasets();
  await refreshUsage();
}

/** Read and show the caller's quotas and their use. */
export async function refreshUsage() {
  const usage = await call("GET", "/v1/usage");
  const q = usage.quotas;
  const u = usage.used;
  const rows = [
    ["Open conversations", `${u.max_conversations} of ${q.max_conversations}`],
    ["Runs in the last hour", `${u.runs_per_hour} of ${q.runs_per_hour}`],
    ["Sandbox CPU seconds, 24 h", `${Number(u.cpu_seconds_per_day).toFixed(1)} of ${q.cpu_seconds_per_day}`],
    ["Stored data", `${formatSize(u.dataset_bytes)} of ${formatSize(q.dataset_bytes)}`],
    ["Storage (with runs)", `${formatSize(u.storage_bytes)} of ${formatSize(q.storage_bytes)}`],
    ["Largest upload", formatSize(q.upload_bytes)],
    ["Team", usage.team ?? "none"],
    ...spendRows(usage.spend ?? {}),
  ];
  const list = clear($("usage"));
  for (const [name, value] of rows) append(list, el("dt", {}, name), el("dd", {}, value));
}

/** One row per money budget: spent of the cap (estimated when token counts were), its reset. */
function spendRows(spend) {
  const currency = spend.currency ?? "";
  return (spend.budgets ?? []).map((budget) => {
    const whose = budget.scope === "team" ? `Team ${budget.name}` : "You";
    const spent = `${formatMoney(budget.spent, currency)} spent`;
    const estimated = budget.estimated ? " (estimated)" : "";
    const value = budget.limit === null || budget.limit === undefined
      ? `${spent}${estimated}; no cap`
      : `${spent}${estimated} of ${formatMoney(budget.limit, currency)}; starts again ${formatMoment(budget.resets_at)}`;
    return [`${whose}, money this ${budget.period}`, value];
  });
}

/** The name of one of the caller's datasets (its id if it is not listed). */
export function datasetName(id) {
  return state.datasets.find((dataset) => dataset.id === id)?.name ?? id;
}

async function uploadFiles(files) {
  const bar = $("upload-progress");
  for (const file of files) {
    bar.hidden = false;
    bar.value = 0;
    say("data-status", `Uploading ${file.name}…`);
    try {
      const dataset = await upload(file, (fraction) => { bar.value = Math.round(fraction * 100); });
      bar.value = 100;
      if (state.conversation === null) state.selected.add(dataset.id);
      say("data-status", `Uploaded ${dataset.name} (${formatSize(dataset.size)}).`);
    } catch (error) {
      say("data-status", `${file.name}: ${error.message}`, "error");
    }
  }
  bar.hidden = true;
  $("file-input").value = "";
  await guarded("data-status", async () => { await refreshDatasets(); await refreshUsage(); });
}

export function setUpDropZone() {
  const zone = $("dropzone");
  for (const name of ["dragenter", "dragover"]) {
    zone.addEventListener(name, (event) => {
      event.preventDefault();
      zone.classList.add("dragging");
    });
  }
  for (const name of ["dragleave", "drop"]) {
    zone.addEventListener(name, () => zone.classList.remove("dragging"));
  }
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    const files = [...(event.dataTransfer?.files ?? [])];
    if (files.length) uploadFiles(files);
  });
  $("file-input").addEventListener("change", (event) => uploadFiles([...event.target.files]));
}
