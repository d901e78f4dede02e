//! `GET /ui`: the live status page, one self-contained HTML file compiled into the
//! binary (`ui.html`: inline CSS, inline script, charts drawn as inline SVG; nothing
//! is fetched from anywhere but this gateway's `/admin/*`).
//!
//! The page itself holds no data: it is the same bytes for everyone, and it is
//! served wherever `/admin/*` is (on the admin listener only, with
//! `admin.listen`). Everything it shows it fetches every few seconds from
//! `/admin/endpoints`, `/admin/traffic`, `/admin/decisions` and `/admin/policies`,
//! which keep their admin check: with admin keys configured the page asks for one
//! once, keeps it in the tab's `sessionStorage` and sends it as
//! `Authorization: Bearer <key>`. Its content security policy lets it talk to this
//! origin only and load nothing else.

use http::{HeaderValue, Response, StatusCode};

use crate::body::{self, Body};

/// The page.
pub const PAGE: &str = include_str!("ui.html");

/// The page's `content-security-policy`: inline script and style only, requests to
/// this origin only, no frames, no forms posting elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /ui`.
pub fn page() -> Response<Body> {
    let mut r = Response::new(body::full(PAGE));
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    h.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}
