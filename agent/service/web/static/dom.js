// DOM building without HTML parsing: every string becomes a text node.
//
// Model text, program output, file names and column names are hostile, so the
// page never assigns innerHTML or outerHTML, never calls insertAdjacentHTML or
// document.write: it builds elements and sets textContent. The CSP forbids
// inline script as a second line of defence.
//
// Text can also lie without markup: a bidi override (U+202E) draws "0.14%" as
// "41.0%", a zero-width character hides a difference. visible() shows every
// control, format (bidi, zero-width) and unassigned character as \uXXXX, and
// append() and setText() use it, so no hostile string reaches the page raw.

const HIDDEN = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}]/gu;

/** Text with every control, format (bidi) and invisible character shown as \uXXXX. */
export function visible(text) {
  return String(text).replace(HIDDEN, (ch) => (ch === "\n" || ch === "\t" ? ch
    : `\\u${ch.codePointAt(0).toString(16).padStart(4, "0")}`));
}

/** Set a node's text (escaped by visible()). */
export function setText(node, text) {
  node.textContent = visible(text ?? "");
  return node;
}

/**
 * Create an element: el("p", {class: "note"}, "text", child, ...).
 * Attributes are set with setAttribute (never on* handlers: those are refused);
 * children that are strings become text nodes.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.toLowerCase().startsWith("on")) throw new Error(`event attribute ${name} refused`);
    node.setAttribute(name, value === true ? "" : visible(value));
  }
  append(node, ...children);
  return node;
}

/** Append children (nodes or strings, as text) to a node. */
export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

/** Remove every child of a node. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** Bytes as KiB/MiB/GiB, as the server writes them. */
export function formatSize(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(bytes) || 0;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** POSIX seconds as a short local date and time. */
export function formatTime(seconds) {
  const date = new Date(Number(seconds) * 1000);
  return date.toLocaleString(undefined, {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  });
}

/** A URL path with each segment encoded (artifact names may hold any character). */
export function encodePath(path) {
  return String(path).split("/").map(encodeURIComponent).join("/");
}

/** A wait in seconds as people say it: "40 s", "3 min", "1 h 5 min". */
export function formatWait(seconds) {
  const s = Math.max(1, Math.ceil(Number(seconds) || 0));
  if (s < 60) return `${s} s`;
  const minutes = Math.ceil(s / 60);
  if (minutes < 60) return `${minutes} min`;
  const rest = minutes % 60;
  return `${Math.floor(minutes / 60)} h${rest ? ` ${rest} min` : ""}`;
}

/** A moment (a Date, or an ISO string) as a short local date and time. */
export function formatMoment(moment) {
  const date = moment instanceof Date ? moment : new Date(String(moment));
  if (Number.isNaN(date.getTime())) return String(moment ?? "");
  return formatTime(date.getTime() / 1000);
}

/**
 * An amount of money to read: cents, not four decimals ("less than 0.01" when it is),
 * in the currency's own form when it is an ISO code the browser knows.
 */
export function formatMoney(amount, currency) {
  const value = Number(amount) || 0;
  const tiny = value > 0 && value < 0.01;
  const shown = tiny ? 0.01 : value;
  let text = `${shown.toFixed(2)} ${currency ?? ""}`.trim();
  try {
    if (currency) {
      text = new Intl.NumberFormat(undefined, { style: "currency", currency }).format(shown);
    }
  } catch {
    // not an ISO 4217 code (a policy may name any unit): the plain figure and its name
  }
  return tiny ? `less than ${text}` : text;
}
