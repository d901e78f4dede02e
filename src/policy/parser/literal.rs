//! Decoding of literal tokens: strings with escapes, integers and floats with `_`,
//! durations and percentages. Each function gets the token text and its span and
//! returns a plain-sentence error for malformed input.

use super::Res;
use crate::policy::ast::Span;
use crate::policy::diagnostic::{codes, Diagnostic};

/// Decodes the inside of a string literal: `\"`, `\\`, `\n`, `\t`, `\r`, `\0`, `\u{...}`.
pub(super) fn string(raw: &str, span: Span) -> Res<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('u') => {
                let rest: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let hex = rest.strip_prefix('{').unwrap_or("");
                match u32::from_str_radix(hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) if rest.starts_with('{') => out.push(ch),
                    _ => {
                        return Err(Diagnostic::error(
                            codes::BAD_LITERAL,
                            span,
                            format!("`\\u{rest}}}` is not a valid Unicode escape"),
                        )
                        .with_help("write a code point in hex, like `\\u{e9}`"))
                    }
                }
            }
            other => {
                let shown = other.map(String::from).unwrap_or_default();
                return Err(Diagnostic::error(
                    codes::BAD_LITERAL,
                    span,
                    format!("`\\{shown}` is not a known escape in a string"),
                )
                .with_help("the escapes are \\\" \\\\ \\n \\t \\r \\0 and \\u{...}"));
            }
        }
    }
    Ok(out)
}

/// A whole number with optional `_` separators.
pub(super) fn int(text: &str, span: Span) -> Res<i64> {
    let clean: String = text.chars().filter(|&c| c != '_').collect();
    clean.parse::<i64>().map_err(|_| {
        Diagnostic::error(
            codes::BAD_LITERAL,
            span,
            format!(
                "the number `{text}` is too large; the largest is {}",
                i64::MAX
            ),
        )
    })
}

/// A whole number written after a `-` (`digits` without the sign), as the negative
/// value: `-9223372036854775808` (`i64::MIN`) is accepted although its digits alone
/// are one past `i64::MAX`. `span` covers the sign and the digits.
pub(super) fn neg_int(digits: &str, span: Span) -> Res<i64> {
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    clean
        .parse::<u64>()
        .ok()
        .and_then(|m| 0i64.checked_sub_unsigned(m))
        .ok_or_else(|| {
            Diagnostic::error(
                codes::BAD_LITERAL,
                span,
                format!(
                    "the number `-{digits}` is too small; the smallest is {}",
                    i64::MIN
                ),
            )
        })
}

/// A float with optional `_` separators; infinite values are rejected.
pub(super) fn float(text: &str, span: Span) -> Res<f64> {
    let clean: String = text.chars().filter(|&c| c != '_').collect();
    match clean.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(Diagnostic::error(
            codes::BAD_LITERAL,
            span,
            format!("the number `{text}` is too large"),
        )),
    }
}

/// A decimal `I[.F]` scaled by `10^scale` exactly; `None` if it is not a whole number
/// after scaling or overflows.
fn scaled_decimal(text: &str, scale: u32) -> Option<i128> {
    let clean: String = text.chars().filter(|&c| c != '_').collect();
    let (int_part, frac) = match clean.split_once('.') {
        Some((i, f)) => (i, f),
        None => (clean.as_str(), ""),
    };
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale as usize || int_part.len() > 30 {
        return None;
    }
    let i: i128 = int_part.parse().ok()?;
    let f: i128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let f_scaled = f * 10i128.pow(scale - frac.len() as u32);
    i.checked_mul(10i128.pow(scale))?.checked_add(f_scaled)
}

/// `250ms`, `1.5s`, `5m`, `1h` → milliseconds.
pub(super) fn duration(text: &str, span: Span) -> Res<i64> {
    let (num, mult) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3_600_000)
    } else {
        (text, 1)
    };
    // Scale by 3 decimals so that `1.5s` is exact; then divide by 1000 exactly.
    let thousandths = scaled_decimal(num, 3);
    let ms = thousandths
        .and_then(|t| t.checked_mul(mult))
        .filter(|v| v % 1000 == 0)
        .map(|v| v / 1000)
        .and_then(|v| i64::try_from(v).ok());
    ms.ok_or_else(|| {
        Diagnostic::error(
            codes::BAD_LITERAL,
            span,
            format!("`{text}` is not a whole number of milliseconds"),
        )
        .with_help("durations are counted in whole milliseconds, like `250ms` or `1.5s`")
    })
}

/// `5%`, `12.5%`, `0.25%` → basis points (1% = 100).
pub(super) fn percent(text: &str, span: Span) -> Res<i64> {
    let num = text.strip_suffix('%').unwrap_or(text);
    scaled_decimal(num, 2)
        .and_then(|v| i64::try_from(v).ok())
        .ok_or_else(|| {
            Diagnostic::error(
                codes::BAD_LITERAL,
                span,
                format!("`{text}` has more than two decimals or is too large"),
            )
            .with_help("percentages take at most two decimals, like `12.25%`")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_decode() {
        let s = Span::default();
        assert_eq!(string(r#"a\"b\n\u{e9}"#, s).unwrap(), "a\"b\né");
        assert!(string(r"\q", s).is_err());
        assert!(string(r"\u{zz}", s).is_err());
        assert_eq!(int("1_000", s).unwrap(), 1000);
        assert!(int("99999999999999999999", s).is_err());
        assert!(int("9223372036854775808", s).is_err());
        assert_eq!(neg_int("9223372036854775808", s).unwrap(), i64::MIN);
        assert_eq!(neg_int("1_000", s).unwrap(), -1000);
        assert!(neg_int("9223372036854775809", s).is_err());
        assert!(neg_int("99999999999999999999", s).is_err());
        assert_eq!(duration("250ms", s).unwrap(), 250);
        assert_eq!(duration("1.5s", s).unwrap(), 1500);
        assert_eq!(duration("5m", s).unwrap(), 300_000);
        assert_eq!(duration("1h", s).unwrap(), 3_600_000);
        assert!(duration("1.5ms", s).is_err());
        assert_eq!(percent("5%", s).unwrap(), 500);
        assert_eq!(percent("12.5%", s).unwrap(), 1250);
        assert!(percent("1.234%", s).is_err());
        assert_eq!(float("1e-3", s).unwrap(), 0.001);
        assert!(float("1e999", s).is_err());
    }
}
