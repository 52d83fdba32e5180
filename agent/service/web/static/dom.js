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
