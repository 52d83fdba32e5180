// A small Python highlighter: a tokenizer that yields (kind, text) pairs, and a
// renderer that turns them into <span class="tok-KIND"> elements holding text.
//
// It is for reading, not parsing: strings (with prefixes and triple quotes),
// comments, numbers, keywords, builtins, decorators and the names after def and
// class are told apart; everything else is plain text. The code is the model's,
// so every piece is put in the page as text (escaped by visible() where it
// hides characters). Every alternative of the pattern matches in linear time
// with one way to match each character (a number has no trailing \b to
// backtrack over), and past MAX_CODE characters the rest is plain text.

import { visible } from "./dom.js";

const MAX_CODE = 200000;

const KEYWORDS = new Set([
  "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
  "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
  "if", "import", "in", "is", "lambda", "match", "case", "nonlocal", "not", "or", "pass",
  "raise", "return", "try", "while", "with", "yield",
]);
const BUILTINS = new Set([
  "abs", "all", "any", "bool", "dict", "enumerate", "filter", "float", "format", "getattr",
  "hasattr", "int", "isinstance", "len", "list", "map", "max", "min", "open", "print", "range",
  "repr", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "type", "zip", "self",
]);

// One alternative per token kind, tried in this order at each position.
const TOKEN = new RegExp([
  "(#[^\\n]*)",                                                        // 1 comment
  "((?:[rRbBuUfF]{1,2})?(?:'''[\\s\\S]*?(?:'''|$)|\"\"\"[\\s\\S]*?(?:\"\"\"|$)" +
    "|'(?:\\\\.|[^'\\\\\\n])*'?|\"(?:\\\\.|[^\"\\\\\\n])*\"?))",             // 2 string
  "(@[A-Za-z_][\\w.]*)",                                               // 3 decorator
  "((?:0[xX][\\da-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|" +
    "(?:\\d[\\d_]*(?:\\.[\\d_]*)?|\\.\\d[\\d_]*)(?:[eE][+-]?\\d+)?[jJ]?))",    // 4 number
  "([A-Za-z_][\\w]*)",                                                 // 5 name
  "(\\s+)",                                                            // 6 space
  "([^\\sA-Za-z_\\d#'\"@]+|.)",                                        // 7 other
].join("|"), "gy");

/** The code as [kind, text] pairs; joined, the texts are the code unchanged. */
export function tokenize(code) {
  const rest = code.length > MAX_CODE ? code.slice(MAX_CODE) : "";
  code = rest ? code.slice(0, MAX_CODE) : code;
  const tokens = [];
  let previous = "";
  TOKEN.lastIndex = 0;
  let match;
  while (TOKEN.lastIndex < code.length && (match = TOKEN.exec(code)) !== null) {
    const [text, comment, string, decorator, number, name] = match;
    let kind = "plain";
    if (comment !== undefined) kind = "comment";
    else if (string !== undefined) kind = "string";
    else if (decorator !== undefined) kind = "decorator";
    else if (number !== undefined) kind = "number";
    else if (name !== undefined) {
      if (previous === "def" || previous === "class") kind = "def";
      else if (KEYWORDS.has(name)) kind = "keyword";
      else if (BUILTINS.has(name)) kind = "builtin";
    }
    tokens.push([kind, text]);
    if (name !== undefined) previous = name;
    else if (!/^\s+$/.test(text)) previous = "";
  }
  if (rest) tokens.push(["plain", rest]);
  return tokens;
}

/** A <code> element holding the highlighted code (text nodes only). */
export function highlight(code) {
  const node = document.createElement("code");
  node.className = "language-python";
  for (const [kind, text] of tokenize(code)) {
    if (kind === "plain") {
      node.append(document.createTextNode(visible(text)));
    } else {
      const span = document.createElement("span");
      span.className = `tok-${kind}`;
      span.textContent = visible(text);
      node.append(span);
    }
  }
  return node;
}
