// extension.js starts `switchyard lsp` for .policy buffers: checked with stand-ins
// for the `vscode` API and the language client (neither runs outside VS Code).
"use strict";
const Module = require("node:module");
const path = require("node:path");
const test = require("node:test");
const assert = require("node:assert");

test("activate starts `switchyard lsp` (or switchyard.path) for switchyard-policy buffers", async () => {
  const made = [];
  let stopped = 0;
  let setting = undefined;
  const stubs = {
    vscode: {
      workspace: { getConfiguration: (s) => ({ get: (k) => (s === "switchyard" && k === "path" ? setting : undefined) }) },
    },
    "vscode-languageclient/node": {
      LanguageClient: class {
        constructor(id, name, server, client) {
          made.push({ id, name, server, client });
        }
        start() {
          return Promise.resolve();
        }
        stop() {
          stopped += 1;
          return Promise.resolve();
        }
      },
    },
  };
  const load = Module._load;
  Module._load = function (request, ...rest) {
    return request in stubs ? stubs[request] : load.call(this, request, ...rest);
  };
  try {
    const ext = require(path.join(__dirname, "../extension.js"));
    await ext.activate();
    assert.strictEqual(made.length, 1);
    const { server, client } = made[0];
    assert.deepStrictEqual(server.run, { command: "switchyard", args: ["lsp"] });
    assert.deepStrictEqual(
      client.documentSelector.map((d) => d.language),
      ["switchyard-policy", "switchyard-policy"],
    );
    setting = "/opt/switchyard/bin/switchyard";
    await ext.activate();
    assert.strictEqual(made[1].server.run.command, setting);
    await ext.deactivate();
    assert.strictEqual(stopped, 1);
  } finally {
    Module._load = load;
  }
});

test("package.json contributes the language, the grammar and the setting", () => {
  const pkg = require("../package.json");
  const lang = pkg.contributes.languages[0];
  assert.strictEqual(lang.id, "switchyard-policy");
  assert.deepStrictEqual(lang.extensions, [".policy"]);
  assert.strictEqual(pkg.contributes.grammars[0].scopeName, "source.switchyard-policy");
  assert.ok(pkg.contributes.configuration.properties["switchyard.path"]);
  assert.strictEqual(pkg.main, "./extension.js");
});
