// The page's client of the sbx HTTP API: the same endpoints the curl examples use.
//
// The session cookie is sent by the browser (HttpOnly: this script never sees it);
// every change carries the CSRF token that GET /web/session returned.

let csrfToken = null;

/** Remember the CSRF token of the signed-in session (null after sign-out). */
export function setCsrf(token) {
  csrfToken = token;
}

import { formatMoment, formatWait } from "./dom.js";

/**
 * An RFC 9457 problem (or any non-2xx answer) from the server. A refusal that says
 * when to come back (`Retry-After`, 429 and 503) says it in its message too.
 */
export class ApiError extends Error {
  constructor(status, problem, retryAfter = null) {
    const detail = problem && typeof problem === "object" ? problem.detail : null;
    const wait = retryAfterSeconds(retryAfter ?? problem?.retry_after);
    const when = wait === null ? ""
      : ` Try again in ${formatWait(wait)} (at ${formatMoment(new Date(Date.now() + wait * 1000))}).`;
    super(`${detail || `the server answered ${status}`}${when}`);
    this.status = status;
    this.problem = problem;
    this.retryAfter = wait;
  }
}

/** Retry-After's seconds (a number or an HTTP date), or null. */
function retryAfterSeconds(value) {
  if (value === null || value === undefined || value === "") return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds : null;
  const date = Date.parse(String(value));
  return Number.isNaN(date) ? null : Math.max(0, (date - Date.now()) / 1000);
}

function headers(method, json) {
  const result = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD" && csrfToken) result["X-CSRF-Token"] = csrfToken;
  if (json) result["Content-Type"] = "application/json";
  return result;
}

/** Call the API; the parsed JSON answer (null for 204), or an ApiError. */
export async function call(method, path, body) {
  const init = { method, headers: headers(method, body !== undefined), credentials: "same-origin" };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) throw new ApiError(response.status, data, response.headers.get("Retry-After"));
  return data;
}

/**
 * Upload one file as multipart/form-data (part "file"), reporting progress as a
 * fraction; resolves to the dataset, rejects with an ApiError.
 */
export function upload(file, onProgress) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("POST", "/v1/datasets");
    request.responseType = "json";
    request.setRequestHeader("Accept", "application/json");
    if (csrfToken) request.setRequestHeader("X-CSRF-Token", csrfToken);
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    });
    request.addEventListener("load", () => {
      if (request.status >= 200 && request.status < 300) resolve(request.response);
      else reject(new ApiError(request.status, request.response, request.getResponseHeader("Retry-After")));
    });
    request.addEventListener("error", () => reject(new ApiError(0, null)));
    const form = new FormData();
    form.append("file", file, file.name);
    request.send(form);
  });
}
