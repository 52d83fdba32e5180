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

const GAP = /\s{2,}/;
const NUMBER = /^[-+]?(\d[\d,_]*\.?\d*|\.\d+)(e[-+]?\d+)?%?$/i;

function cells(line) {
  const trimmed = line.trimEnd();
  if (!trimmed.trim()) return [];
  return trimmed.trim().split(GAP);
}

function rowsFrom(lines, start, width) {
  const rows = [];
  let index = start;
  while (index < lines.length) {
    const row = cells(lines[index]);
    if (row.length !== width || /^\s/.test(lines[index])) break;
    rows.push(row);
    index += 1;
  }
  return rows;
}

/** The table starting at lines[start], or null: {header, rows, end}. */
export function tableAt(lines, start) {
  const header = cells(lines[start]);
  if (header.length < 2) return null;
  let first = start + 1;
  let indexName = null;
  const next = lines[first] ?? "";
  if (cells(next).length === 1 && !/^\s/.test(next) && next.trimEnd().length < next.length) {
    indexName = cells(next)[0];  // pandas' index-name line: "region" padded with spaces
    first += 1;
  }
  const probe = cells(lines[first] ?? "");
  if (probe.length !== header.length && probe.length !== header.length + 1) return null;
  const rows = rowsFrom(lines, first, probe.length);
  if (rows.length < 2) return null;
  if (!rows.some((row) => row.slice(1).some((cell) => NUMBER.test(cell)))) return null;
  const head = probe.length === header.length + 1 ? ["", ...header] : [...header];
  if (indexName !== null) head[0] = indexName;
  return { header: head, rows, end: first + rows.length };
}

/** stdout as parts: {kind: "text", text} and {kind: "table", header, rows, text}. */
export function splitOutput(text) {
  const lines = text.split("\n");
  const parts = [];
  let pending = [];
  const flush = () => {
    if (pending.length) parts.push({ kind: "text", text: pending.join("\n") });
    pending = [];
  };
  let index = 0;
  while (index < lines.length) {
    const table = tableAt(lines, index);
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
  return parts.filter((part) => part.kind === "table" || part.text.trim() !== "");
}
