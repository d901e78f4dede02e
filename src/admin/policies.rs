//! `GET /admin/policies` and `POST /admin/reload`: the serving policy set, the hot
//! reload counters and last error, and a forced rebuild on demand.

use http::{Response, StatusCode};

use crate::body::{self, Body};
use crate::reload::{unix_ms, Outcome, Reloader};

/// The `GET /admin/policies` body: the active version, what it serves (`serving`, one
/// sentence, and `operator_files`, how many of the files are the operator's), engine,
/// its files, when it
/// was loaded, reload counters, the last rebuild's duration (ms) and the last reload
/// error (cleared by the next successful or unchanged reload).
///
/// No absolute host path is shown: the directory appears by its own name, and in
/// the last error its full path is replaced by that name (files are named relative
/// to it already).
pub fn status_json(r: &Reloader) -> serde_json::Value {
    let snap = r.current();
    let mut st = r.status();
    let dir_name = r.dir().map(dir_name);
    if let Some(e) = st.last_error.as_mut() {
        e.message = without_host_path(r, &e.message);
    }
    serde_json::json!({
        "version": snap.version,
        "serving": snap.serving(),
        "operator_files": snap.operator_files().count(),
        "engine": snap.compiled.engine(),
        "interpreter_reason": snap.compiled.fallback_reason(),
        "code_bytes": snap.compiled.code_bytes(),
        "live_compiled_modules": crate::policy::jit::live_compiled_modules(),
        "files": snap.files,
        "loaded_at_unix_ms": unix_ms(snap.loaded_at),
        "directory": dir_name,
        "reloads": {"ok": st.ok, "failed": st.failed, "unchanged": st.unchanged},
        "last_reload_ms": st.last_duration_ms,
        "last_error": st.last_error,
    })
}

/// The policy directory as the admin answers show it: its own name.
fn dir_name(d: &std::path::Path) -> String {
    d.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "policies".into())
}

/// A reload error as the admin answers show it: the policy directory's full path
/// (in an I/O error such as "cannot read DIR/a.policy") replaced by its name. Files
/// in diagnostics are named relative to the directory already.
fn without_host_path(r: &Reloader, message: &str) -> String {
    match r.dir() {
        Some(d) => message.replace(&*d.display().to_string(), &dir_name(d)),
        None => message.to_string(),
    }
}

/// `GET /admin/policies`.
pub fn status(r: &Reloader) -> Response<Body> {
    body::json(
        StatusCode::OK,
        serde_json::to_vec(&status_json(r)).unwrap_or_default(),
    )
}

/// `POST /admin/reload`: a forced rebuild now; 200 with the outcome and the serving
/// version, or 422 with the rendered error (the previous set keeps serving), with
/// no absolute host path, as in [`status_json`].
pub async fn reload(r: &Reloader) -> Response<Body> {
    r.request_sync_force();
    let outcome = r.rebuild().await;
    let version = r.current().version.clone();
    let (status, body) = match outcome {
        Outcome::Swapped(_) => (
            StatusCode::OK,
            serde_json::json!({"outcome": "swapped", "version": version}),
        ),
        Outcome::Unchanged => (
            StatusCode::OK,
            serde_json::json!({"outcome": "unchanged", "version": version}),
        ),
        Outcome::Failed(m) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({"outcome": "failed", "error": without_host_path(r, &m), "version": version}),
        ),
    };
    body::json(status, serde_json::to_vec(&body).unwrap_or_default())
}
