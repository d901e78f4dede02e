//! `switchyard lsp`: a Language Server Protocol server over stdio for `.policy` files.
//!
//! Features: diagnostics as you type (the codes, spans, messages, help and severities
//! of `switchyard lint`, checked as a whole policy set against the registry of the
//! nearest `switchyard.yaml`), hover on fields, functions, strategies, models and
//! endpoints, go to definition (strategies, routes, rules, a strategy's locals, and
//! models and endpoints in `switchyard.yaml`), completion, formatting through
//! `switchyard fmt`, the document outline, and quick fixes for did-you-mean
//! suggestions.
//!
//! The loop is synchronous (lsp-server's message types, no async runtime): a reader
//! thread frames stdin ([`transport`]); the main thread answers each message in
//! order, and after the messages already queued are handled, re-lints the sets they
//! changed once, so a burst of keystrokes costs one lint.
//!
//! Everything the policy pipeline computes stays in `crate::policy` (pure); this
//! module adds the I/O (stdin, stdout, reading the set and its config) and the editor
//! features built on the pipeline's tables.

use std::io::{BufReader, Write};
use std::process::ExitCode;
use std::sync::mpsc;

use lsp_types::{
    CodeActionProviderCapability, CompletionOptions, HoverProviderCapability, OneOf,
    PositionEncodingKind, SaveOptions, ServerCapabilities, ServerInfo, TextDocumentSyncCapability,
    TextDocumentSyncKind, TextDocumentSyncOptions, TextDocumentSyncSaveOptions,
};

pub mod analysis;
pub mod complete;
pub mod diagnostics;
pub mod features;
pub mod lex;
pub mod outline;
pub mod server;
pub mod symbols;
pub mod text;
pub mod transport;
pub mod workspace;
pub mod yaml;

use server::{Flow, Server};
use transport::Incoming;

/// What the server can do, as announced to the client.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        position_encoding: Some(PositionEncodingKind::UTF16),
        text_document_sync: Some(TextDocumentSyncCapability::Options(
            TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::INCREMENTAL),
                save: Some(TextDocumentSyncSaveOptions::SaveOptions(SaveOptions {
                    include_text: Some(false),
                })),
                ..TextDocumentSyncOptions::default()
            },
        )),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into(), "\"".into(), "(".into()]),
            ..CompletionOptions::default()
        }),
        document_formatting_provider: Some(OneOf::Left(true)),
        document_symbol_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
        ..ServerCapabilities::default()
    }
}

/// The `initialize` result: capabilities and the server's name and version.
pub fn initialize_result() -> serde_json::Value {
    serde_json::to_value(lsp_types::InitializeResult {
        capabilities: capabilities(),
        server_info: Some(ServerInfo {
            name: "switchyard".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
    })
    .unwrap_or_default()
}

/// Serves LSP on stdin/stdout until `exit` or the end of the input. Exit code 0
/// after `shutdown` then `exit`; 1 on `exit` without `shutdown` or when the input
/// ends first (as the protocol says).
pub fn run() -> ExitCode {
    let (tx, rx) = mpsc::channel::<Incoming>();
    // The reader blocks on stdin; it ends with the input or the process.
    std::thread::spawn(move || {
        let mut input = BufReader::new(std::io::stdin().lock());
        loop {
            let m = transport::read(&mut input).unwrap_or(Incoming::Eof);
            let end = matches!(m, Incoming::Eof);
            if tx.send(m).is_err() || end {
                return;
            }
        }
    });
    let code = serve(&rx, std::io::stdout());
    ExitCode::from(code)
}

/// The main loop over already framed input: returns the exit code.
pub fn serve(rx: &mpsc::Receiver<Incoming>, out: impl Write) -> u8 {
    let mut server = Server::new(out);
    loop {
        let Ok(first) = rx.recv() else { return 1 };
        let mut next = Some(first);
        // Handle everything already queued, then lint once.
        while let Some(m) = next {
            match m {
                Incoming::Eof => {
                    server.publish();
                    return 1;
                }
                Incoming::Bad(code, msg, id) => server.bad(code, &msg, id),
                Incoming::Message(m) => {
                    if let Flow::Exit(code) = server.handle(m) {
                        return code;
                    }
                }
            }
            next = rx.try_recv().ok();
        }
        server.publish();
    }
}

#[cfg(test)]
mod tests;
