// The model's plan as a checklist above a run's steps, redrawn on every `plan` event.
//
// Each `plan` event carries the whole plan (every step with its status) and
// what changed since the previous revision; the checklist is rebuilt from it,
// and the steps that changed are marked until the next revision. Descriptions,
// tool names and the note are model-written: they become text nodes through
// el() (dom.js), never markup.

import { el, append, clear } from "./dom.js";

const LABELS = { pending: "to do", in_progress: "in progress", done: "done", dropped: "dropped" };
const MARKS = { pending: "☐", in_progress: "◐", done: "☑", dropped: "☒" };

export class PlanView {
  constructor() {
    this.list = el("ol", { class: "plan-steps" });
    this.heading = el("h3", {}, "Plan");
    this.note = el("p", { class: "plan-note", hidden: true });
    this.removed = el("p", { class: "plan-removed", hidden: true });
    this.root = el("section", { class: "plan", "aria-label": "Plan", hidden: true },
      this.heading, this.list, this.note, this.removed);
  }

  /** Show one revision: the whole plan, its changes marked. */
  update(event) {
    const changes = new Map();
    for (const change of Array.isArray(event.changes) ? event.changes : []) {
      changes.set(String(change.step ?? ""), change);
    }
    clear(this.list);
    const steps = Array.isArray(event.steps) ? event.steps : [];
    for (const step of steps) {
      const status = LABELS[step.status] ? step.status : "pending";
      const change = changes.get(String(step.description ?? ""));
      const item = el("li", { class: `plan-step plan-${status}${change ? " plan-changed" : ""}`,
        "data-status": status },
      el("span", { class: "plan-mark", "aria-hidden": "true" }, MARKS[status]), " ",
      el("span", { class: "plan-text" }, String(step.description ?? "")),
      step.tool ? el("span", { class: "plan-tool" }, ` · ${step.tool}`) : null,
      el("span", { class: "plan-status" }, ` (${LABELS[status]}${change?.change === "added" && event.revision > 1 ? ", new" : ""})`));
      append(this.list, item);
    }
    this.heading.textContent = `Plan · revision ${Number(event.revision ?? 1)}`;
    this.note.textContent = event.note ? `Why it changed: ${event.note}` : "";
    this.note.hidden = !event.note;
    const removed = [...changes.values()].filter((change) => change.change === "removed");
    this.removed.textContent = removed.length
      ? `Removed: ${removed.map((change) => change.step ?? "").join("; ")}` : "";
    this.removed.hidden = !removed.length;
    this.root.hidden = !steps.length;
  }

  /** The steps an answer leaves open, for beside the answer (null when none). */
  static pendingNote(event) {
    const pending = Array.isArray(event.plan_pending) ? event.plan_pending : [];
    if (!pending.length) return null;
    return el("p", { class: "answer-plan-open", role: "note" },
      `⚠ The answer leaves ${pending.length} plan step(s) not done: ${pending.join("; ")}`);
  }
}
