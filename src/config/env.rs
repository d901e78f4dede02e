//! `${VAR}` substitution in `switchyard.yaml`.
//!
//! Why: a container image or a compose file configures one image for many
//! deployments through environment variables (the twelve-factor habit), and an
//! operator should not template YAML by hand to change a base URL or a port.
//!
//! The rule, applied to every string *value* of the parsed YAML tree (never to keys,
//! and never to the text before parsing, so a variable's value cannot add YAML
//! structure):
//! - `${NAME}`: the value of the environment variable `NAME`; an unset variable is an
//!   error naming the value's path and the variable.
//! - `${NAME:-default}`: the variable's value, or `default` when it is unset or empty
//!   (as in POSIX shells and Docker Compose).
//! - `$${`: a literal `${` (the escape); any other `$` is kept as written.
//! - `NAME` is letters, digits and `_`, not starting with a digit; anything else
//!   between `${` and `}` (or no `}`) is an error.
//!
//! A value that is exactly one reference (`port: ${PORT}`, or quoted, `"${PORT}"`, as
//! it must be inside a flow collection `{ … }` or `[ … ]`, where YAML reads `{` and `}`
//! as structure) is read again as a YAML scalar after substitution, so numbers and
//! booleans keep their types
//! (`max_body_bytes: ${MAX_BODY:-1048576}` is a number); a reference inside a longer
//! string (`base_url: http://${HOST}:8000/v1`) gives a string.
//!
//! Provider API keys are read from the variables `api_key_env` names, at startup, and
//! never pass through here.

use serde_yaml::Value;

use super::load::ConfigError;

/// Substitutes `${VAR}` references in every string value under `value` (see the
/// module doc), looking variables up with `lookup`. `path` is the dotted path of
/// `value`, for errors.
///
/// # Errors
/// Every unset variable without a default and every malformed reference, each with
/// the path of its value, appended to `errors`; the value is then left as written.
pub fn substitute(
    value: &mut Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
) {
    match value {
        Value::String(s) if s.contains('$') => match expand(s, lookup) {
            Ok(Expanded { text, whole }) => {
                *value = if whole {
                    scalar(text)
                } else {
                    Value::String(text)
                };
            }
            Err(message) => errors.push(ConfigError {
                path: path.to_string(),
                message,
            }),
        },
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                let key = match k {
                    Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other)
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default(),
                };
                let child = if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                };
                substitute(v, &child, lookup, errors);
            }
        }
        Value::Sequence(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                substitute(v, &format!("{path}[{i}]"), lookup, errors);
            }
        }
        Value::Tagged(t) => substitute(&mut t.value, path, lookup, errors),
        _ => {}
    }
}

/// The environment of the process, for [`substitute`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A string after substitution.
struct Expanded {
    text: String,
    /// The string was one reference and nothing else.
    whole: bool,
}

/// A substituted whole-value reference read as a YAML scalar (number, boolean,
/// null or string); never a mapping or sequence, whatever the variable holds.
fn scalar(text: String) -> Value {
    match serde_yaml::from_str::<Value>(&text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
        _ => Value::String(text),
    }
}

/// Expands the references in `s`.
fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Expanded, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut refs = 0usize;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(esc) = after.strip_prefix("${") {
            out.push_str("${");
            rest = esc;
            continue;
        }
        let Some(body) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = body.find('}') else {
            return Err(format!(
                "`${{` without a closing `}}` in `{}` (write `$${{` for a literal `${{`)",
                bounded(s)
            ));
        };
        let inner = &body[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if !valid_name(name) {
            return Err(format!(
                "`${{{}}}` is not a variable reference: a name is letters, digits and `_`, not starting with a digit, optionally followed by `:-default`",
                bounded(inner)
            ));
        }
        match (lookup(name).filter(|v| default.is_none() || !v.is_empty()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "environment variable `{name}` is not set (write `${{{name}:-default}}` to give a default)"
                ))
            }
        }
        refs += 1;
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    let whole =
        refs == 1 && s.starts_with("${") && s.ends_with('}') && s.matches("${").count() == 1;
    Ok(Expanded { text: out, whole })
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `s` cut to 80 characters for a message.
fn bounded(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(80).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("10.0.0.7".into()),
            "PORT" => Some("8000".into()),
            "EMPTY" => Some(String::new()),
            "FLAG" => Some("true".into()),
            "NESTED" => Some("{a: 1}".into()),
            _ => None,
        }
    }

    fn run(yaml: &str) -> (Value, Vec<ConfigError>) {
        let mut v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut errors = Vec::new();
        substitute(&mut v, "", &env, &mut errors);
        (v, errors)
    }

    #[test]
    fn references_in_values_are_substituted_with_types_for_whole_values() {
        let (v, errors) = run(
            "a: http://${HOST}:${PORT}/v1\nb: ${PORT}\nc: ${MISSING:-42}\nd: ${EMPTY:-x}\ne: ${FLAG}\nf: [\"${HOST}\"]\ni: { port: \"${PORT}\" }\ng: ${NESTED}\nh: ${EMPTY}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(v["a"], Value::String("http://10.0.0.7:8000/v1".into()));
        assert_eq!(v["b"], Value::Number(8000.into()));
        assert_eq!(v["c"], Value::Number(42.into()));
        assert_eq!(v["d"], Value::String("x".into()));
        assert_eq!(v["e"], Value::Bool(true));
        assert_eq!(v["f"][0], Value::String("10.0.0.7".into()));
        // Quoted (as a reference in a flow collection must be), still typed.
        assert_eq!(v["i"]["port"], Value::Number(8000.into()));
        // A variable cannot add structure.
        assert_eq!(v["g"], Value::String("{a: 1}".into()));
        // Set but empty, with no default: the empty string.
        assert_eq!(v["h"], Value::String(String::new()));
    }

    #[test]
    fn escapes_and_lone_dollars_are_kept() {
        let (v, errors) = run("a: cost $5 and $${HOST}\nb: $HOST\n");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(v["a"], Value::String("cost $5 and ${HOST}".into()));
        assert_eq!(v["b"], Value::String("$HOST".into()));
    }

    #[test]
    fn unset_and_malformed_references_name_the_path_and_the_variable() {
        let (_, errors) = run(
            "providers:\n  p: { base_url: \"http://${UPSTREAM_HOST}/v1\" }\nx: [ok, \"${1BAD}\"]\ny: \"${OPEN\"\n",
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(errors[0].path, "providers.p.base_url");
        assert!(
            errors[0].message.contains("`UPSTREAM_HOST` is not set"),
            "{}",
            errors[0].message
        );
        assert_eq!(errors[1].path, "x[1]");
        assert!(errors[1].message.contains("not a variable reference"));
        assert_eq!(errors[2].path, "y");
        assert!(errors[2].message.contains("without a closing"));
    }

    #[test]
    fn keys_are_never_substituted() {
        let (v, errors) = run("${HOST}: 1\n");
        assert!(errors.is_empty());
        assert_eq!(v["${HOST}"], Value::Number(1.into()));
    }
}
