// Starts `switchyard lsp` for .policy files. Plain CommonJS: no build step; the
// one `npm install --omit=dev` in this directory brings vscode-languageclient.
"use strict";
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate() {
  const command = vscode.workspace.getConfiguration("switchyard").get("path") || "switchyard";
  const server = { command, args: ["lsp"] };
  client = new LanguageClient(
    "switchyard",
    "Switchyard policy",
    { run: server, debug: server },
    {
      documentSelector: [
        { scheme: "file", language: "switchyard-policy" },
        { scheme: "untitled", language: "switchyard-policy" },
      ],
    },
  );
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
