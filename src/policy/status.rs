//! Upstream HTTP statuses a `fallback ... on <statuses>` clause names: the set that
//! moves a failed attempt on to the next endpoint of the plan even when the status
//! would otherwise go back to the client.
//!
//! The policy side only produces a [`FallbackOn`] (checked, in the decision); the
//! gateway's dispatch asks [`FallbackOn::matches`] about each failed attempt's status.

use serde::{Serialize, Serializer};

/// One item of an `on` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusItem {
    /// One status, 400 to 599.
    Code(u16),
    /// A class: `4` for `4xx` (400..=499), `5` for `5xx` (500..=599).
    Class(u8),
}

impl StatusItem {
    /// Whether `status` is this status or in this class.
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusItem::Code(c) => c == status,
            StatusItem::Class(k) => (400..=599).contains(&status) && status / 100 == u16::from(k),
        }
    }

    /// The item as written: `429` or `5xx`.
    pub fn text(self) -> String {
        match self {
            StatusItem::Code(c) => c.to_string(),
            StatusItem::Class(k) => format!("{k}xx"),
        }
    }
}

/// The statuses of a `fallback ... on` clause, in source order (checked: each status
/// in 400..=599, classes `4xx`/`5xx` only, no item listed twice or inside a listed
/// class). Serialized as the list of items as written, e.g. `["409", "5xx"]`.
///
/// Meaning for dispatch: an attempt that fails with an upstream status that
/// [`FallbackOn::matches`] moves on to the next endpoint of the plan (the retries on
/// the same endpoint are unchanged), even a status such as 400 that would otherwise be
/// returned to the client at once. A status that does not match is handled as without
/// the clause.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FallbackOn {
    items: Vec<StatusItem>,
}

impl FallbackOn {
    /// A set of `items` (already checked).
    pub fn new(items: Vec<StatusItem>) -> FallbackOn {
        FallbackOn { items }
    }

    /// Whether an upstream `status` is in the set.
    pub fn matches(&self, status: u16) -> bool {
        self.items.iter().any(|i| i.matches(status))
    }

    /// The items in source order.
    pub fn items(&self) -> &[StatusItem] {
        &self.items
    }
}

impl Serialize for FallbackOn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.items.iter().map(|i| i.text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_codes_and_classes() {
        let on = FallbackOn::new(vec![StatusItem::Code(400), StatusItem::Class(5)]);
        assert!(on.matches(400) && on.matches(500) && on.matches(503) && on.matches(599));
        assert!(!on.matches(401) && !on.matches(429) && !on.matches(600) && !on.matches(200));
        assert_eq!(
            serde_json::to_value(&on).unwrap(),
            serde_json::json!(["400", "5xx"])
        );
    }
}
