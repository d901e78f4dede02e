//! The server's state and its handling of each message.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;

use lsp_server::{Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{LogMessage, Notification as _, PublishDiagnostics};
use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, CodeActionParams, CompletionParams,
    CompletionResponse, Diagnostic as LspDiagnostic, DidChangeTextDocumentParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DidSaveTextDocumentParams,
    DocumentFormattingParams, DocumentSymbolParams, GotoDefinitionParams, GotoDefinitionResponse,
    Hover, HoverContents, HoverParams, LogMessageParams, MarkupContent, MarkupKind, MessageType,
    PublishDiagnosticsParams, TextEdit, Url, WorkspaceEdit,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::analysis::SetIndex;
use super::text::{apply_change, LineIndex};
use super::workspace::{Documents, SetKey};
use super::{complete, diagnostics, features, symbols, transport};

/// JSON-RPC and LSP error codes used here.
pub mod code {
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i32 = -32602;
    /// A request after `shutdown`, or a second `initialize`.
    pub const INVALID_REQUEST: i32 = -32600;
    /// The server failed on a request (a bug; reported, not fatal).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// A request before `initialize`.
    pub const SERVER_NOT_INITIALIZED: i32 = -32002;
    /// A well-formed request the server cannot carry out (formatting a file that
    /// does not parse).
    pub const REQUEST_FAILED: i32 = -32803;
}

/// Where the server is in the protocol's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for `initialize`.
    Uninitialized,
    /// Serving.
    Running,
    /// `shutdown` answered; waiting for `exit`.
    ShutDown,
}

/// Everything the server holds.
pub struct Server<W: Write> {
    out: W,
    /// The lifecycle phase.
    pub phase: Phase,
    docs: Documents,
    /// Sets whose diagnostics must be recomputed, each with one of its files.
    dirty: HashMap<SetKey, Url>,
    /// What was last published per file (only files with something, or just
    /// cleared).
    published: HashMap<Url, Vec<LspDiagnostic>>,
    /// The files each set published for.
    members: HashMap<SetKey, BTreeSet<Url>>,
}

/// What the main loop should do after a message.
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop with this exit code (`exit`: 0 after `shutdown`, else 1).
    Exit(u8),
}

impl<W: Write> Server<W> {
    /// A server writing to `out`.
    pub fn new(out: W) -> Server<W> {
        Server {
            out,
            phase: Phase::Uninitialized,
            docs: Documents::default(),
            dirty: HashMap::new(),
            published: HashMap::new(),
            members: HashMap::new(),
        }
    }

    fn send(&mut self, m: Message) {
        // A closed output means the client is gone; the next read ends the loop.
        let _ = transport::write(&mut self.out, &m);
    }

    fn reply(&mut self, id: RequestId, result: Result<Value, (i32, String)>) {
        let r = match result {
            Ok(v) => Response::new_ok(id, v),
            Err((code, msg)) => Response::new_err(id, code, msg),
        };
        self.send(Message::Response(r));
    }

    /// Answers a frame that could not be used.
    pub fn bad(&mut self, code: i32, message: &str, id: Value) {
        let _ = transport::write_error(&mut self.out, code, message, id);
    }

    /// Handles one message.
    pub fn handle(&mut self, m: Message) -> Flow {
        match m {
            Message::Request(r) => {
                self.request(r);
                Flow::Continue
            }
            Message::Notification(n) => self.notification(n),
            // The server sends no requests, so a response is stray: ignored.
            Message::Response(_) => Flow::Continue,
        }
    }

    fn request(&mut self, r: Request) {
        let id = r.id.clone();
        let result = match (self.phase, r.method.as_str()) {
            (Phase::Uninitialized, "initialize") => {
                self.phase = Phase::Running;
                Ok(super::initialize_result())
            }
            (Phase::Uninitialized, _) => Err((
                code::SERVER_NOT_INITIALIZED,
                format!("`{}` before `initialize`", r.method),
            )),
            (Phase::ShutDown, _) => Err((
                code::INVALID_REQUEST,
                format!("`{}` after `shutdown`: only `exit` is expected", r.method),
            )),
            (Phase::Running, "initialize") => Err((
                code::INVALID_REQUEST,
                "the server is already initialized".to_string(),
            )),
            (Phase::Running, "shutdown") => {
                self.phase = Phase::ShutDown;
                Ok(Value::Null)
            }
            (Phase::Running, _) => {
                let method = r.method.clone();
                // Defence in depth: a bug in a feature answers this request with an
                // error instead of taking the editor's server down.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.feature(r)))
                    .unwrap_or_else(|_| {
                        Err((
                            code::INTERNAL_ERROR,
                            format!("internal error in `{method}`"),
                        ))
                    })
            }
        };
        self.reply(id, result);
    }

    fn feature(&mut self, r: Request) -> Result<Value, (i32, String)> {
        match r.method.as_str() {
            "textDocument/hover" => {
                let p: HoverParams = params(r.params)?;
                let pos = p.text_document_position_params;
                let hover = self.with_index(&pos.text_document.uri, pos.position, |ix, off| {
                    features::hover(ix, off).map(|(md, range)| Hover {
                        contents: HoverContents::Markup(MarkupContent {
                            kind: MarkupKind::Markdown,
                            value: md,
                        }),
                        range: Some(range),
                    })
                });
                json(hover.flatten())
            }
            "textDocument/definition" => {
                let p: GotoDefinitionParams = params(r.params)?;
                let pos = p.text_document_position_params;
                let locs = self
                    .with_index(&pos.text_document.uri, pos.position, features::definition)
                    .unwrap_or_default();
                json((!locs.is_empty()).then_some(GotoDefinitionResponse::Array(locs)))
            }
            "textDocument/completion" => {
                let p: CompletionParams = params(r.params)?;
                let pos = p.text_document_position;
                let items = self
                    .with_index(&pos.text_document.uri, pos.position, complete::complete)
                    .unwrap_or_default();
                json(CompletionResponse::Array(items))
            }
            "textDocument/formatting" => {
                let p: DocumentFormattingParams = params(r.params)?;
                self.format(&p.text_document.uri)
            }
            "textDocument/documentSymbol" => {
                let p: DocumentSymbolParams = params(r.params)?;
                let text = self.text(&p.text_document.uri)?;
                json(symbols::document_symbols(&text))
            }
            "textDocument/codeAction" => {
                let p: CodeActionParams = params(r.params)?;
                json(quick_fixes(&p))
            }
            m => Err((code::METHOD_NOT_FOUND, format!("unknown method `{m}`"))),
        }
    }

    /// The text of open document `uri`.
    fn text(&self, uri: &Url) -> Result<String, (i32, String)> {
        self.docs
            .open
            .get(uri)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| (code::INVALID_PARAMS, format!("{uri} is not open")))
    }

    /// Runs `f` on the index of `uri`'s set at `pos` (`None` when `uri` is not open).
    fn with_index<T>(
        &self,
        uri: &Url,
        pos: lsp_types::Position,
        f: impl FnOnce(&SetIndex<'_>, usize) -> T,
    ) -> Option<T> {
        let (_, text) = self.docs.open.get(uri)?;
        let offset = LineIndex::new(text).offset(text, pos);
        let (_, view) = self.docs.read_set(uri);
        let ix = SetIndex::new(&view, uri)?;
        Some(f(&ix, offset))
    }

    fn format(&self, uri: &Url) -> Result<Value, (i32, String)> {
        let text = self.text(uri)?;
        match crate::policy::fmt::format_str(uri.as_str(), &text) {
            Ok(new) if new == text => json(Vec::<TextEdit>::new()),
            Ok(new) => {
                let li = LineIndex::new(&text);
                json(vec![TextEdit::new(li.range(&text, 0, text.len()), new)])
            }
            Err(crate::policy::fmt::FmtError::Unsafe(why)) => Err((
                code::REQUEST_FAILED,
                format!("cannot format: {why} (a bug in the formatter)"),
            )),
            Err(crate::policy::fmt::FmtError::Parse(sources, diags)) => {
                let first = diags
                    .first()
                    .map(|d| {
                        let at = d.span.map(|s| sources.location(s)).unwrap_or_default();
                        format!("{} ({at})", d.message)
                    })
                    .unwrap_or_default();
                Err((
                    code::REQUEST_FAILED,
                    format!("cannot format: the file does not parse: {first}"),
                ))
            }
        }
    }

    fn notification(&mut self, n: Notification) -> Flow {
        if n.method == "exit" {
            return Flow::Exit(if self.phase == Phase::ShutDown { 0 } else { 1 });
        }
        if self.phase != Phase::Running {
            return Flow::Continue;
        }
        let method = n.method.clone();
        if let Err((_, why)) = self.document_notification(n) {
            self.log_error(&ignored_notification(&method, &why));
        }
        Flow::Continue
    }

    /// Applies a document notification (`didOpen`, `didChange`, `didClose`,
    /// `didSave`); other notifications need nothing.
    ///
    /// # Errors
    /// The parameters do not fit the method; nothing was applied.
    fn document_notification(&mut self, n: Notification) -> Result<(), (i32, String)> {
        match n.method.as_str() {
            "textDocument/didOpen" => {
                let d = params::<DidOpenTextDocumentParams>(n.params)?.text_document;
                self.docs.open.insert(d.uri.clone(), (d.version, d.text));
                self.mark(&d.uri);
            }
            "textDocument/didChange" => {
                let p = params::<DidChangeTextDocumentParams>(n.params)?;
                let uri = p.text_document.uri;
                if let Some((version, text)) = self.docs.open.get_mut(&uri) {
                    *version = p.text_document.version;
                    for c in p.content_changes {
                        apply_change(text, c);
                    }
                    self.mark(&uri);
                }
            }
            "textDocument/didClose" => {
                let uri = params::<DidCloseTextDocumentParams>(n.params)?
                    .text_document
                    .uri;
                self.mark(&uri);
                self.docs.open.remove(&uri);
            }
            "textDocument/didSave" => {
                let p = params::<DidSaveTextDocumentParams>(n.params)?;
                self.mark(&p.text_document.uri);
            }
            // `initialized`, `$/cancelRequest`, `$/setTrace`, settings: nothing to do.
            _ => {}
        }
        Ok(())
    }

    /// Sends `message` to the client's log (`window/logMessage`, type error).
    fn log_error(&mut self, message: &str) {
        let params = LogMessageParams {
            typ: MessageType::ERROR,
            message: message.to_string(),
        };
        self.send(Message::Notification(Notification::new(
            LogMessage::METHOD.to_string(),
            params,
        )));
    }

    fn mark(&mut self, uri: &Url) {
        let (key, _) = self.docs.set_key(uri);
        self.dirty.insert(key, uri.clone());
    }

    /// Recomputes and publishes the diagnostics of every set changed since the last
    /// call.
    pub fn publish(&mut self) {
        let dirty: Vec<(SetKey, Url)> = self.dirty.drain().collect();
        for (key, uri) in dirty {
            let (key2, view) = self.docs.read_set(&uri);
            let open: Vec<Url> = view
                .uris
                .values()
                .filter(|u| self.docs.open.contains_key(u))
                .cloned()
                .chain(self.docs.open.contains_key(&uri).then(|| uri.clone()))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let diags = if view.blocked.is_empty() {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| view.lint()))
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut now = diagnostics::by_file(&view, &diags, &open);
            let before = self.members.remove(&key).unwrap_or_default();
            for u in before.union(&self.members.remove(&key2).unwrap_or_default()) {
                now.entry(u.clone()).or_default();
            }
            let mut members = BTreeSet::new();
            for (u, list) in now {
                if !list.is_empty() {
                    members.insert(u.clone());
                }
                let same = self.published.get(&u).is_some_and(|p| *p == list)
                    || (list.is_empty() && !self.published.contains_key(&u));
                if same {
                    continue;
                }
                let version = self.docs.open.get(&u).map(|(v, _)| *v);
                let params = PublishDiagnosticsParams::new(u.clone(), list.clone(), version);
                self.send(Message::Notification(Notification::new(
                    PublishDiagnostics::METHOD.to_string(),
                    params,
                )));
                if list.is_empty() {
                    self.published.remove(&u);
                } else {
                    self.published.insert(u, list);
                }
            }
            self.members.insert(key2, members);
        }
    }
}

/// The log line for a notification dropped for its parameters. A notification gets
/// no reply (JSON-RPC 2.0: not even an error), so the client's log is where it is
/// said; a lost `didChange` also leaves the server's copy of the document behind
/// the editor's, which only a fresh `didOpen` mends.
fn ignored_notification(method: &str, why: &str) -> String {
    let mut m = format!("switchyard: ignored `{method}`: {why}");
    if method == "textDocument/didChange" {
        m.push_str(
            "; the server's copy of the document may now differ from the editor's: close and reopen it",
        );
    }
    m
}

fn params<T: DeserializeOwned>(v: Value) -> Result<T, (i32, String)> {
    serde_json::from_value(v).map_err(|e| (code::INVALID_PARAMS, format!("invalid params: {e}")))
}

fn json(v: impl serde::Serialize) -> Result<Value, (i32, String)> {
    serde_json::to_value(v).map_err(|e| (code::INTERNAL_ERROR, e.to_string()))
}

/// Quick fixes: the suggestions (`did you mean ...`) of the diagnostics in the
/// request's context.
fn quick_fixes(p: &CodeActionParams) -> Vec<CodeActionOrCommand> {
    let mut out = Vec::new();
    for d in &p.context.diagnostics {
        let Some(data) = &d.data else { continue };
        let (Ok(uri), Ok(range), Some(new)) = (
            serde_json::from_value::<Url>(data["uri"].clone()),
            serde_json::from_value::<lsp_types::Range>(data["range"].clone()),
            data["replacement"].as_str(),
        ) else {
            continue;
        };
        let edit = WorkspaceEdit::new(
            [(uri, vec![TextEdit::new(range, new.to_string())])]
                .into_iter()
                .collect(),
        );
        out.push(CodeActionOrCommand::CodeAction(CodeAction {
            title: format!("Replace with `{new}`"),
            kind: Some(CodeActionKind::QUICKFIX),
            diagnostics: Some(vec![d.clone()]),
            edit: Some(edit),
            is_preferred: Some(true),
            ..CodeAction::default()
        }));
    }
    out
}
