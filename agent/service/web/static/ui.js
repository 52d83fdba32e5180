// What every part of the page shares: its state, element lookup, status lines, error handling.

import { ApiError } from "./api.js";
import { visible } from "./dom.js";

export const $ = (id) => document.getElementById(id);

/** The page's state: who is signed in, the datasets, the open conversation, the running run. */
export const state = {
  principal: null,
  datasets: [],
  selected: new Set(),
  conversation: null,
  activeRun: null,
  source: null,
  generation: 0,  // counts the openings of a conversation: a late answer checks it is still current
  asking: false,  // a question is on its way: a second Enter does not send it again
  views: [],
};

let onSessionEnded = () => {};

/** What to do when the server says the session is over (401). */
export function whenSessionEnds(handler) {
  onSessionEnded = handler;
}

/** Show a status line (as text). */
export function say(id, text, kind = "info") {
  const node = $(id);
  node.textContent = visible(text);
  node.dataset.kind = kind;
}

/** Run an action; its error is shown in the status line `id` (a 401 signs out). */
export async function guarded(id, action) {
  try {
    await action();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      onSessionEnded("Your session ended; sign in again.");
      return;
    }
    say(id, error instanceof Error ? error.message : String(error), "error");
  }
}
