// The page's client of the sbx HTTP API: the same endpoints the curl examples use.
//
// The session cookie is sent by the browser (HttpOnly: this script never sees it);
// every change carries the CSRF token that GET /web/session returned.

let csrfToken = null;

/** Remember the CSRF token of the signed-in session (null after sign-out). */
export function setCsrf(token) {
  csrfToken = token;
}

/** An RFC 9457 problem (or any non-2xx answer) from the server. */
export class ApiError extends Error {
  constructor(status, problem) {
    const detail = problem && typeof problem === "object" ? problem.detail : null;
    super(detail || `the server answered ${status}`);
    this.status = status;
    this.problem = problem;
  }
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
  if (!response.ok) throw new ApiError(response.status, data);
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
      else reject(new ApiError(request.status, request.response));
    });
    request.addEventListener("error", () => reject(new ApiError(0, null)));
    const form = new FormData();
    form.append("file", file, file.name);
    request.send(form);
  });
}
