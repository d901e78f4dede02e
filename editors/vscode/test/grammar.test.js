// The TextMate grammar under VS Code's own engine (vscode-textmate with the
// Oniguruma regex library), against every shipped policy:
//   - every token class the grammar defines appears in them (the two classes that
//     valid policies never contain are checked on a line of their own);
//   - no character but whitespace is left without a scope, and nothing is invalid;
//   - every keyword of the parser's grammar (grammar/policy.pest) and every built-in
//     function of the checker's table is highlighted as such, so the two grammars
//     cannot drift apart silently.
// Run: npm ci && node --test test/   (scripts/test.sh does).
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const test = require("node:test");
const assert = require("node:assert");
const vsctm = require("vscode-textmate");
const onig = require("vscode-oniguruma");

const REPO = path.resolve(__dirname, "../../..");
const GRAMMAR = path.join(__dirname, "../syntaxes/switchyard-policy.tmLanguage.json");
const SCOPE = "source.switchyard-policy";

function policies(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...policies(p));
    else if (e.name.endsWith(".policy")) out.push(p);
  }
  return out.sort();
}

const SHIPPED = [
  ...policies(path.join(REPO, "examples/policies")),
  ...policies(path.join(REPO, "tests/policies/valid")),
];

async function loadGrammar() {
  const wasm = fs.readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm"));
  await onig.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (p) => new onig.OnigScanner(p),
      createOnigString: (s) => new onig.OnigString(s),
    }),
    loadGrammar: async (scope) =>
      scope === SCOPE ? vsctm.parseRawGrammar(fs.readFileSync(GRAMMAR, "utf8"), GRAMMAR) : null,
  });
  return registry.loadGrammar(SCOPE);
}

const grammarPromise = loadGrammar();

/** Tokens of `text`: [{ line, text, scopes }]. */
function tokenize(grammar, text) {
  let stack = vsctm.INITIAL;
  const out = [];
  text.split(/\r?\n/).forEach((line, n) => {
    const r = grammar.tokenizeLine(line, stack);
    for (const t of r.tokens) {
      out.push({ line: n + 1, text: line.slice(t.startIndex, t.endIndex), scopes: t.scopes });
    }
    stack = r.ruleStack;
  });
  return out;
}

/** Every scope name the grammar file defines. */
function grammarClasses() {
  const names = new Set();
  const walk = (v) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) {
        if (k === "name" && typeof x === "string" && x.endsWith(".switchyard-policy")) names.add(x);
        else walk(x);
      }
    }
  };
  walk(JSON.parse(fs.readFileSync(GRAMMAR, "utf8")).repository);
  return [...names].sort();
}

test("shipped policies exist", () => {
  assert.ok(SHIPPED.length >= 12, SHIPPED.join("\n"));
});

test("every token class appears and nothing is left unscoped or invalid", async () => {
  const grammar = await grammarPromise;
  const seen = new Set();
  for (const file of SHIPPED) {
    for (const t of tokenize(grammar, fs.readFileSync(file, "utf8"))) {
      t.scopes.forEach((s) => seen.add(s));
      const where = `${path.relative(REPO, file)}:${t.line} \`${t.text}\` ${t.scopes.join(" ")}`;
      if (t.text.trim() !== "") {
        assert.ok(t.scopes.length > 1, `no scope: ${where}`);
      }
      assert.ok(!t.scopes.some((s) => s.startsWith("invalid")), `invalid: ${where}`);
    }
  }
  // Valid shipped policies hold no string escape, nothing invalid and no status
  // class: those classes are checked on lines written for them.
  const rare = {
    "constant.character.escape.switchyard-policy": 'reject 400 "say \\"no\\" \\u{e9}"',
    "invalid.illegal.switchyard-policy": "route r when request.stream @ {",
    // No shipped policy has a `fallback ... on` clause.
    "constant.numeric.status-class.switchyard-policy": 'fallback "claude-sonnet" on 409, 5xx',
  };
  for (const [cls, line] of Object.entries(rare)) {
    const scopes = tokenize(grammar, line).flatMap((t) => t.scopes);
    assert.ok(scopes.includes(cls), `${cls} on ${line}: ${scopes}`);
  }
  const missing = grammarClasses().filter((c) => !seen.has(c) && !(c in rare));
  assert.deepStrictEqual(missing, [], "grammar classes that no shipped policy shows");
});

test("keywords of grammar/policy.pest and the checker's built-in functions are highlighted", async () => {
  const grammar = await grammarPromise;
  const pest = fs.readFileSync(path.join(REPO, "grammar/policy.pest"), "utf8");
  // Quoted words of the parser's grammar, less the literal parts of numbers.
  const units = new Set(["ms", "s", "m", "h", "e", "xx"]);
  const words = [...new Set([...pest.matchAll(/"([a-z_]{2,})"/g)].map((m) => m[1]))].filter(
    (w) => !units.has(w),
  );
  assert.ok(words.length > 50, words.join(" "));
  const calls = fs.readFileSync(path.join(REPO, "src/policy/check/expr/calls.rs"), "utf8");
  const table = calls.slice(calls.indexOf("pub const FUNCTIONS"), calls.indexOf("impl Checker"));
  const fns = [...table.matchAll(/^\s*\("([a-z_]+)",/gm)].map((m) => m[1]);
  assert.ok(fns.length >= 20, fns.join(" "));
  for (const w of words) {
    // `header(..)` and `metadata(..)` split keys are always calls.
    const t = tokenize(grammar, fns.includes(w) ? `${w}(x)` : w)[0];
    const s = t.scopes[t.scopes.length - 1];
    assert.match(s, /^(keyword|constant|support\.function)\./, `\`${w}\` is ${s}`);
  }
  for (const f of fns) {
    const t = tokenize(grammar, `${f}(x)`)[0];
    assert.ok(t.scopes.includes("support.function.builtin.switchyard-policy"), `${f}: ${t.scopes}`);
  }
});
