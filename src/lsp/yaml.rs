//! Where a model or an endpoint is declared in a `switchyard.yaml`, for go to
//! definition. The config loader keeps no positions, so this looks for the
//! declaration in the text: a model is a key under `models:`, an endpoint the
//! `name:` of an endpoint entry (else the model that holds it). Either style, block
//! or flow, is found; when nothing matches there is simply no location.

/// Byte offset of model `name`'s key under `models:` in `yaml`.
pub fn model_offset(yaml: &str, name: &str) -> Option<usize> {
    let models = section(yaml)?;
    find_key(yaml, models, name)
}

/// Byte offset of the declaration of endpoint `id` (its `name:` value), or of the
/// key of `model`, the model that holds it, when its name is implied.
pub fn endpoint_offset(yaml: &str, id: &str, model: Option<&str>) -> Option<usize> {
    let models = section(yaml)?;
    let mut from = models;
    while let Some(i) = yaml[from..].find("name:") {
        let at = from + i;
        let value = yaml[at + 5..].trim_start_matches([' ', '\t']);
        let start = yaml.len() - value.len();
        let v = value
            .split([',', '}', '\n', '#'])
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches(['"', '\'']);
        if v == id {
            return Some(start);
        }
        from = at + 5;
    }
    model.and_then(|m| find_key(yaml, models, m))
}

/// The offset just after the top-level `models:` key.
fn section(yaml: &str) -> Option<usize> {
    let mut off = 0;
    for line in yaml.split_inclusive('\n') {
        if line.starts_with("models:") {
            return Some(off + "models:".len());
        }
        off += line.len();
    }
    None
}

/// The first `name:` key (bare or quoted) at or after `from`, preceded by a line
/// start, space, `{` or `,`.
fn find_key(yaml: &str, from: usize, name: &str) -> Option<usize> {
    for quoted in [
        format!("{name}:"),
        format!("\"{name}\":"),
        format!("'{name}':"),
    ] {
        let mut at = from;
        while let Some(i) = yaml.get(at..).and_then(|s| s.find(&quoted)) {
            let pos = at + i;
            let ok = yaml[..pos]
                .chars()
                .next_back()
                .is_none_or(|c| matches!(c, ' ' | '\t' | '\n' | '{' | ','));
            if ok {
                return Some(pos);
            }
            at = pos + 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_models_and_endpoints_in_block_and_flow_style() {
        let y = "providers: { p: { kind: mock } }\nmodels:\n  gpt-4o:\n    endpoints:\n      - { name: openai/gpt-4o, provider: p, model: a }\n  mini:\n    endpoints:\n      - provider: p\n        model: b\n";
        assert_eq!(&y[model_offset(y, "gpt-4o").unwrap()..][..7], "gpt-4o:");
        assert_eq!(&y[model_offset(y, "mini").unwrap()..][..5], "mini:");
        assert_eq!(model_offset(y, "gpt-4"), None);
        let e = endpoint_offset(y, "openai/gpt-4o", Some("gpt-4o")).unwrap();
        assert!(y[e..].starts_with("openai/gpt-4o,"));
        let e = endpoint_offset(y, "p/b", Some("mini")).unwrap();
        assert!(y[e..].starts_with("mini:"));
        let f = "models: { m: { endpoints: [ { provider: p, model: a } ] } }\n";
        assert!(f[model_offset(f, "m").unwrap()..].starts_with("m:"));
    }
}
