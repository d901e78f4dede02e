//! Validation of `scheduler:` (a child of `load`, sharing its validator).

use serde_yaml::Value;

use super::super::cache::parse_duration_ms;
use super::super::sched::{parse_hours, OffPeakConfig, SchedConfig, MAX_WAIT_LIMIT_MS};
use super::super::sched::{DEFAULT_MAX_HELD, DEFAULT_MAX_WAIT_MS};
use super::{describe, join, Validator};

impl Validator {
    pub(super) fn scheduler(&mut self, value: &Value) -> SchedConfig {
        let path = "scheduler";
        let mut cfg = SchedConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(
            map,
            &["aging_ms", "max_queued", "queue_timeout_ms", "off_peak"],
            path,
        );
        if let Some(n) = self.uint(map, "aging_ms", path, 1, 3_600_000) {
            cfg.aging_ms = n;
        }
        if let Some(n) = self.uint(map, "max_queued", path, 1, 1_000_000) {
            cfg.max_queued = n as u32;
        }
        let tpath = join(path, "queue_timeout_ms");
        if let Some(t) = self.mapping(map.get("queue_timeout_ms").unwrap_or(&Value::Null), &tpath) {
            self.unknown_keys(t, &["high", "normal", "low"], &tpath);
            let q = &mut cfg.queue_timeout_ms;
            for (key, slot) in [
                ("high", &mut q.high),
                ("normal", &mut q.normal),
                ("low", &mut q.low),
            ] {
                if let Some(n) = self.uint(t, key, &tpath, 1, 3_600_000) {
                    *slot = n;
                }
            }
        }
        cfg.off_peak = self.off_peak(map.get("off_peak").unwrap_or(&Value::Null));
        cfg
    }

    fn off_peak(&mut self, value: &Value) -> Option<OffPeakConfig> {
        let path = "scheduler.off_peak";
        let map = self.mapping(value, path)?;
        self.unknown_keys(map, &["hours", "timezone", "max_wait", "max_held"], path);
        let hours = match map.get("hours") {
            None | Some(Value::Null) => {
                self.err(join(path, "hours"), "missing; the window, e.g. `0-6`");
                None
            }
            Some(Value::String(s)) => match parse_hours(s) {
                Ok(h) => Some(h),
                Err(e) => {
                    self.err(join(path, "hours"), e);
                    None
                }
            },
            Some(other) => {
                self.err(
                    join(path, "hours"),
                    format!(
                        "expected hours like `0-6` (start-end), found {}",
                        describe(other)
                    ),
                );
                None
            }
        };
        let name = self
            .string(map, "timezone", path)
            .unwrap_or_else(|| "UTC".to_string());
        let timezone = match jiff::tz::TimeZone::get(&name) {
            Ok(tz) => Some(tz),
            Err(_) => {
                self.err(
                    join(path, "timezone"),
                    format!(
                        "unknown time zone \"{name}\"; use an IANA name such as `UTC`, \
                         `Europe/Berlin` or `America/New_York`"
                    ),
                );
                None
            }
        };
        let mut max_wait_ms = DEFAULT_MAX_WAIT_MS;
        match map.get("max_wait") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => match parse_duration_ms(s) {
                Ok(ms) if (1_000..=MAX_WAIT_LIMIT_MS).contains(&ms) => max_wait_ms = ms,
                Ok(_) => self.err(
                    join(path, "max_wait"),
                    format!("\"{s}\" is out of range (1s to 24h)"),
                ),
                Err(e) => self.err(join(path, "max_wait"), e),
            },
            Some(other) => self.err(
                join(path, "max_wait"),
                format!(
                    "expected a duration like `6h` or `90m`, found {}",
                    describe(other)
                ),
            ),
        }
        let max_held = self
            .uint(map, "max_held", path, 1, 1_000_000)
            .map_or(DEFAULT_MAX_HELD, |n| n as u32);
        let (start_hour, end_hour) = hours?;
        Some(OffPeakConfig {
            start_hour,
            end_hour,
            timezone: timezone?,
            timezone_name: name,
            max_wait_ms,
            max_held,
        })
    }
}
