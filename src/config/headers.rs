//! `providers.<name>.forward_headers`: the operator's list of client headers to
//! forward to one provider, and the headers no list may name. The whole forwarding
//! rule is in [`crate::egress::forward`].

use http::header::HeaderName;

/// Headers that are never forwarded, listed or not (lowercase).
const NEVER: [&str; 20] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "set-cookie",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "accept-encoding",
    "expect",
];

/// Whether header `name` (lowercase) may never be forwarded (step 1 of the rule):
/// also what config loading refuses in `forward_headers`.
pub fn never_forwarded(name: &str) -> bool {
    NEVER.contains(&name) || name == "accept" || name.starts_with("x-switchyard-")
}

/// One `forward_headers` entry: an exact lowercase name, or a prefix (`x-foo-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// This header.
    Name(String),
    /// Every header whose name starts with this.
    Prefix(String),
}

impl Listed {
    /// Parses a config entry (case-insensitive; a trailing `*` is a prefix).
    ///
    /// # Errors
    /// A sentence for an entry that is not a header name, or one rule 1 forbids.
    pub fn parse(entry: &str) -> Result<Listed, String> {
        let lower = entry.trim().to_ascii_lowercase();
        let (name, prefix) = match lower.strip_suffix('*') {
            Some(p) => (p.to_string(), true),
            None => (lower, false),
        };
        if name.is_empty() || HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("\"{entry}\" is not a header name"));
        }
        let forbidden = if prefix {
            NEVER.iter().any(|n| n.starts_with(&name)) || "x-switchyard-".starts_with(&name)
        } else {
            never_forwarded(&name)
        };
        if forbidden {
            return Err(format!(
                "\"{entry}\" would forward a credential, hop-by-hop or framing header, which Switchyard never forwards"
            ));
        }
        Ok(if prefix {
            Listed::Prefix(name)
        } else {
            Listed::Name(name)
        })
    }

    /// Whether header `name` (lowercase) is this entry's.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Listed::Name(n) => n == name,
            Listed::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_listed_credential_is_a_config_error_naming_the_entry() {
        let text = "providers:\n  p: { kind: openai-compatible, base_url: http://127.0.0.1:1/v1, forward_headers: [x-request-tag, Authorization] }\nmodels:\n  m: { endpoints: [ { provider: p, model: x } ] }\n";
        let e = crate::config::parse_str(text, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("providers.p.forward_headers[1]"), "{e}");
        let ok = text.replace(", Authorization", ", x-stainless-*");
        let c = crate::config::parse_str(&ok, None).unwrap();
        assert_eq!(c.providers[0].forward_headers.len(), 2);
        assert!(c.providers[0].stream_usage);
    }
}
