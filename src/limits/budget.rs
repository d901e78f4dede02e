//! Spend budgets: UTC periods and the in-memory spend ledger.

/// The UTC day (days since 1970-01-01) and month (`year * 12 + month - 1`) of
/// `unix_secs`.
pub fn periods(unix_secs: u64) -> (u64, u64) {
    let day = unix_secs / 86_400;
    let (y, m, _) = civil(day);
    (day, y * 12 + (m - 1))
}

/// The period suffixes of Redis spend keys: `d<yyyymmdd>` and `m<yyyymm>`.
pub fn period_names(unix_secs: u64) -> (String, String) {
    let (y, m, d) = civil(unix_secs / 86_400);
    (format!("d{y:04}{m:02}{d:02}"), format!("m{y:04}{m:02}"))
}

/// (year, month 1..=12, day 1..=31) of day `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Seconds from `unix_secs` to the end of its UTC day, or of its calendar month
/// (`monthly`): when a spent budget of that period has room again.
pub fn secs_to_period_end(unix_secs: u64, monthly: bool) -> u64 {
    let day = unix_secs / 86_400;
    let end_day = if monthly {
        let (y, m, _) = civil(day);
        let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        days_from_civil(y, m, 1)
    } else {
        day + 1
    };
    (end_day * 86_400).saturating_sub(unix_secs)
}

/// Days since 1970-01-01 of (year, month 1..=12, day 1..=31), on or after the
/// epoch (Howard Hinnant's `days_from_civil`, the inverse of [`civil`]).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// One scope's spend in the current day and month, USD.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    day: u64,
    day_usd: f64,
    month: u64,
    month_usd: f64,
}

impl Spend {
    /// (spent today, spent this month) in USD as of `unix_secs`.
    pub fn at(&self, unix_secs: u64) -> (f64, f64) {
        let (day, month) = periods(unix_secs);
        (
            if self.day == day { self.day_usd } else { 0.0 },
            if self.month == month {
                self.month_usd
            } else {
                0.0
            },
        )
    }

    /// Adds `usd` (negative: gives back) in the day and month of `unix_secs`,
    /// starting a new day or month when that is a later one. A period already
    /// replaced by a later one is left as it is: the settlement of a request
    /// admitted yesterday does not reset today's spend.
    pub fn add(&mut self, usd: f64, unix_secs: u64) {
        let (day, month) = periods(unix_secs);
        if day >= self.day {
            let d = if self.day == day { self.day_usd } else { 0.0 };
            self.day = day;
            self.day_usd = (d + usd).max(0.0);
        }
        if month >= self.month {
            let m = if self.month == month {
                self.month_usd
            } else {
                0.0
            };
            self.month = month;
            self.month_usd = (m + usd).max(0.0);
        }
    }

    /// Raises the day's spend (or the month's: `monthly`) of `unix_secs` to at least
    /// `usd`; a later period than the one held starts at `usd`, an earlier one is
    /// left alone.
    pub fn raise(&mut self, monthly: bool, usd: f64, unix_secs: u64) {
        let (day, month) = periods(unix_secs);
        let (period, held, now) = if monthly {
            (&mut self.month, &mut self.month_usd, month)
        } else {
            (&mut self.day, &mut self.day_usd, day)
        };
        if now > *period {
            *period = now;
            *held = usd.max(0.0);
        } else if now == *period && usd > *held {
            *held = usd;
        }
    }
}

/// Spend per scope (`k:<key id>`, `o:<org>`), in memory.
#[derive(Debug, Default)]
pub struct Ledger {
    scopes: foldhash::HashMap<String, Spend>,
}

impl Ledger {
    /// (today, this month) of `scope` in USD.
    pub fn spent(&self, scope: &str, unix_secs: u64) -> (f64, f64) {
        self.scopes
            .get(scope)
            .map_or((0.0, 0.0), |s| s.at(unix_secs))
    }

    /// Raises `scope`'s spend of the day (or month: `monthly`) of `unix_secs` to at
    /// least `usd` ([`Spend::raise`]).
    pub fn raise(&mut self, scope: &str, monthly: bool, usd: f64, unix_secs: u64) {
        match self.scopes.get_mut(scope) {
            Some(s) => s.raise(monthly, usd, unix_secs),
            None => self
                .scopes
                .entry(scope.to_string())
                .or_default()
                .raise(monthly, usd, unix_secs),
        }
    }

    /// Adds `usd` to `scope`.
    pub fn add(&mut self, scope: &str, usd: f64, unix_secs: u64) {
        self.scopes
            .entry(scope.to_string())
            .or_default()
            .add(usd, unix_secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_follow_the_utc_calendar() {
        // 2024-02-29T12:00:00Z
        assert_eq!(
            period_names(1_709_208_000),
            ("d20240229".into(), "m202402".into())
        );
        assert_eq!(period_names(0), ("d19700101".into(), "m197001".into()));
        let mut s = Spend::default();
        s.add(1.5, 1_709_208_000);
        assert_eq!(s.at(1_709_208_000 + 3600), (1.5, 1.5));
        // Next day (March 1st): a new day and a new month.
        assert_eq!(s.at(1_709_208_000 + 86_400), (0.0, 0.0));
        // A new day of the same month keeps the month's spend.
        let mut t = Spend::default();
        t.add(1.0, 1_709_208_000 - 86_400);
        t.add(2.0, 1_709_208_000);
        assert_eq!(t.at(1_709_208_000), (2.0, 3.0));
    }

    #[test]
    fn periods_end_at_utc_midnight_and_the_first_of_the_next_month() {
        // 2024-02-29T12:00:00Z: half a day to midnight; the month ends with it.
        assert_eq!(secs_to_period_end(1_709_208_000, false), 43_200);
        assert_eq!(secs_to_period_end(1_709_208_000, true), 43_200);
        // 2024-12-31T00:00:00Z: a day, and to 2025-01-01 for the month too.
        assert_eq!(secs_to_period_end(1_735_603_200, true), 86_400);
        // 2024-02-01T00:00:00Z: the whole of a leap February.
        assert_eq!(secs_to_period_end(1_706_745_600, true), 29 * 86_400);
        for day in [0u64, 59, 365, 11_016, 19_782, 20_000] {
            let (y, m, d) = civil(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
    }

    #[test]
    fn settling_a_reservation_of_yesterday_leaves_today_alone() {
        // 2024-02-28 and 29: a request reserved 1.0 yesterday; today 2.0 was spent;
        // yesterday's request now settles at 0.25 (0.75 given back, in its day).
        let (yesterday, today) = (1_709_208_000 - 86_400, 1_709_208_000);
        let mut s = Spend::default();
        s.add(1.0, yesterday);
        s.add(2.0, today);
        s.add(-0.75, yesterday);
        assert_eq!(s.at(today), (2.0, 2.25), "today kept; the month gives back");
        // A reservation given back whole never leaves spend below zero.
        let mut z = Spend::default();
        z.add(0.1, today);
        z.add(-0.1 - 1e-12, today);
        assert_eq!(z.at(today), (0.0, 0.0));
    }
}
