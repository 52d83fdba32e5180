// DataFrame output shown as tables: pandas prints a frame as fixed-width text
// with columns at least two spaces apart, e.g.
//
//     year        2023      2024  growth_%
//     region
//     South   432268.4  609666.7      41.0
//     West    370607.8  459840.6      24.1
//
// splitOutput() finds such blocks in a program's stdout (a header, an optional
// index-name line, then two or more rows with the same number of cells, at
// least one of them a number) and leaves everything else as text. The cells
// are the program's text and are shown as text.
//
// The text is hostile, so the work is linear and bounded: the number pattern
// has one way to match each character (no backtracking over a digit run), a
// cell longer than MAX_NUMBER is not a number, a line longer than MAX_LINE is
// never part of a table, a table holds at most MAX_ROWS rows, and only the
// first MAX_TEXT characters are looked at (the rest stays plain text); each
// line is split once, and at most MAX_WORK rows are examined in all.

import { append, el } from "./dom.js";

const GAP = /\s{2,}/;
const NUMBER = /^[-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?%?$/i;
const MAX_NUMBER = 64;
const MAX_LINE = 2000;
const MAX_ROWS = 500;
const MAX_TEXT = 200000;
const MAX_WORK = 200000;  // rows looked at in all, over every candidate table

/** Whether a cell reads as a number (bounded: a long cell is not one). */
export function isNumber(cell) {
  return cell.length <= MAX_NUMBER && NUMBER.test(cell);
}

function cells(line) {
  if (line.length > MAX_LINE) return [];
  const trimmed = line.trimEnd();
  if (!trimmed.trim()) return [];
  return trimmed.trim().split(GAP);
}

function rowsFrom(lines, cellsOf, start, width, budget) {
  const rows = [];
  let index = start;
  while (index < lines.length && rows.length < MAX_ROWS && budget.rows > 0) {
    budget.rows -= 1;
    const row = cellsOf(index);
    if (row.length !== width || /^\s/.test(lines[index])) break;
    rows.push(row);
    index += 1;
  }
  return rows;
}

/** Each line's cells, split once however often a line is looked at. */
function cellCache(lines) {
  const cache = new Array(lines.length);
  return (index) => {
    if (index >= lines.length) return [];
    if (cache[index] === undefined) cache[index] = cells(lines[index]);
    return cache[index];
  };
}

/** The table starting at lines[start], or null: {header, rows, end}. */
export function tableAt(lines, start, cellsOf = cellCache(lines), budget = { rows: MAX_WORK }) {
  const header = cellsOf(start);
  if (header.length < 2) return null;
  let first = start + 1;
  let indexName = null;
  const next = lines[first] ?? "";
  if (cellsOf(first).length === 1 && !/^\s/.test(next) && next.trimEnd().length < next.length) {
    indexName = cellsOf(first)[0];  // pandas' index-name line: "region" padded with spaces
    first += 1;
  }
  const probe = cellsOf(first);
  if (probe.length !== header.length && probe.length !== header.length + 1) return null;
  const rows = rowsFrom(lines, cellsOf, first, probe.length, budget);
  if (rows.length < 2) return null;
  if (!rows.some((row) => row.slice(1).some(isNumber))) return null;
  const head = probe.length === header.length + 1 ? ["", ...header] : [...header];
  if (indexName !== null) head[0] = indexName;
  return { header: head, rows, end: first + rows.length };
}

/** stdout as parts: {kind: "text", text} and {kind: "table", header, rows, text}. */
export function splitOutput(text) {
  const lines = text.slice(0, MAX_TEXT).split("\n");
  const parts = [];
  let pending = [];
  const flush = () => {
    if (pending.length) parts.push({ kind: "text", text: pending.join("\n") });
    pending = [];
  };
  const cellsOf = cellCache(lines);
  const budget = { rows: MAX_WORK };
  let index = 0;
  while (index < lines.length) {
    const table = tableAt(lines, index, cellsOf, budget);
    if (table === null) {
      pending.push(lines[index]);
      index += 1;
      continue;
    }
    flush();
    parts.push({ kind: "table", header: table.header, rows: table.rows,
      text: lines.slice(index, table.end).join("\n") });
    index = table.end;
  }
  flush();
  if (text.length > MAX_TEXT) parts.push({ kind: "text", text: text.slice(MAX_TEXT) });
  return parts.filter((part) => part.kind === "table" || part.text.trim() !== "");
}

// A DataFrame result (an execution's rich result's `data`, as the server bounded it) drawn
// as a table. Every cell is the program's text and goes into the page as text, never as
// markup; the page bounds it again.
const MAX_RESULT_COLUMNS = 20;
const MAX_RESULT_ROWS = 50;
const MAX_RESULT_CELL = 100;

function shownCell(value) {
  return value === null || value === undefined ? "" : String(value).slice(0, MAX_RESULT_CELL);
}

/** The DOM table of one `{columns, rows}` result: header cells, then one row per record. */
export function resultTable(result) {
  const columns = (Array.isArray(result?.columns) ? result.columns : []).slice(0, MAX_RESULT_COLUMNS);
  const rows = (Array.isArray(result?.rows) ? result.rows : []).slice(0, MAX_RESULT_ROWS);
  const table = el("table", { class: "frame result-table" });
  append(table, el("thead", {}, el("tr", {}, columns.map((name) => el("th", { scope: "col" }, shownCell(name))))));
  append(table, el("tbody", {}, rows.map((row) => el("tr", {},
    columns.map((_, i) => el("td", {}, shownCell(Array.isArray(row) ? row[i] : null)))))));
  return el("div", { class: "table-wrap", tabindex: "0", role: "region",
    "aria-label": "table the program showed" }, table);
}
