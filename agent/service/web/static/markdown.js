// The model's Markdown, drawn as a small safe subset: never as HTML.
//
// The answer is the model's text, so it is hostile. It is never parsed as
// HTML: each piece becomes a text node inside elements built here (the escape
// comes first, by construction), and only these constructs get an element:
// paragraphs, headings (#, ##, ###), bullet and numbered lists, ``` fenced
// code, `inline code`, **bold** and *italic* / _italic_. A link shows its text
// and its address as text (nothing is fetched or followed); raw HTML shows as
// the characters it is. Input is bounded: past MAX_CHARS the rest is plain text.

import { el, append } from "./dom.js";

const MAX_CHARS = 200000;
const MAX_NESTING = 3;  // inline emphasis inside emphasis, at most this deep
const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|(?<![\w*])\*(?=\S)([^*]*?\S)\*(?![\w*])|(?<![\w_])_(?=\S)([^_]*?\S)_(?![\w_])|\[([^\]\n]{1,300})\]\(([^)\s]{1,500})\)/;

/** Inline constructs of one line or paragraph, as nodes. */
export function inline(text, depth = 0) {
  const nodes = [];
  let rest = text;
  while (rest.length) {
    const found = depth < MAX_NESTING ? INLINE.exec(rest) : null;
    if (!found) {
      nodes.push(rest);
      break;
    }
    if (found.index) nodes.push(rest.slice(0, found.index));
    const [whole, , code, bold, star, under, label, href] = found;
    if (code !== undefined) nodes.push(el("code", {}, code));
    else if (bold !== undefined) nodes.push(el("strong", {}, inline(bold, depth + 1)));
    else if (star !== undefined || under !== undefined) {
      nodes.push(el("em", {}, inline(star ?? under, depth + 1)));
    } else nodes.push(el("span", { class: "md-link" }, label, " (", el("code", {}, href), ")"));
    rest = rest.slice(found.index + whole.length);
  }
  return nodes;
}

function flushParagraph(out, lines) {
  if (lines.length) out.push(el("p", {}, inline(lines.join("\n"))));
  lines.length = 0;
}

/** The answer as a <div class="markdown"> of the safe subset. */
export function renderMarkdown(source) {
  const text = String(source ?? "");
  const body = text.slice(0, MAX_CHARS);
  const out = [];
  const paragraph = [];
  let list = null;
  const lines = body.split("\n");
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i];
    const fence = /^(`{3,}|~{3,})\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      flushParagraph(out, paragraph);
      list = null;
      const code = [];
      i += 1;
      while (i < lines.length && !lines[i].startsWith(fence[1])) code.push(lines[i++]);
      const attrs = fence[2] ? { "data-lang": fence[2] } : {};
      out.push(el("pre", { class: "md-code" }, el("code", attrs, code.join("\n"))));
      continue;
    }
    const heading = /^(#{1,3})\s+(.+?)\s*#*\s*$/.exec(line);
    const item = /^\s*(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(line);
    if (heading) {
      flushParagraph(out, paragraph);
      list = null;
      out.push(el(`h${heading[1].length + 3}`, {}, inline(heading[2])));
    } else if (item) {
      flushParagraph(out, paragraph);
      const kind = item[1] ? "ul" : "ol";
      if (!list || list.tagName.toLowerCase() !== kind) {
        list = el(kind, {});
        out.push(list);
      }
      append(list, el("li", {}, inline(item[3])));
    } else if (!line.trim()) {
      flushParagraph(out, paragraph);
      list = null;
    } else {
      list = null;
      paragraph.push(line);
    }
  }
  flushParagraph(out, paragraph);
  if (text.length > MAX_CHARS) out.push(el("p", {}, text.slice(MAX_CHARS)));
  return el("div", { class: "markdown answer-text" }, out);
}
