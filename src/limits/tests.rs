use super::*;
use crate::config::parse_str;

fn limiter(extra: &str) -> Limiter {
    let yaml = format!(
        "providers: {{ p: {{ kind: mock, pricing: {{ input_per_mtok: 1000000, output_per_mtok: 1000000 }} }} }}\nmodels: {{ m: {{ endpoints: [ {{ provider: p, model: x }} ] }} }}\n{extra}"
    );
    let config = parse_str(&yaml, None).unwrap();
    let registry = Registry::from_config(&config, |_| Some(0));
    Limiter::new(&config, &registry)
}

fn caller(key: &str, org: Option<&str>) -> Caller {
    Caller {
        api_key: Some(key.into()),
        org: org.map(Into::into),
        ..Caller::default()
    }
}

#[test]
fn no_level_is_charged_unless_all_admit() {
    let l = limiter("limits:\n  global: { requests_per_min: 60, burst_requests: 3 }\n  per_key: { requests_per_min: 60, burst_requests: 1 }\n");
    assert!(l.admit_local_at(&caller("a", None), 1, 0, 0).is_ok());
    // Key a is out of room: its refusal must not take from the global bucket.
    for _ in 0..5 {
        let e = l.admit_local_at(&caller("a", None), 1, 0, 0).unwrap_err();
        assert_eq!(e.status(), 429);
        assert_eq!(e.code, Some(Code::RateLimitExceeded));
        assert_eq!(e.retry_after_secs(), Some(1));
    }
    assert!(l.admit_local_at(&caller("b", None), 1, 0, 0).is_ok());
    assert!(l.admit_local_at(&caller("c", None), 1, 0, 0).is_ok());
    // Now the global bucket (3) is empty.
    let e = l.admit_local_at(&caller("d", None), 1, 0, 0).unwrap_err();
    assert!(e.message.contains("global"), "{}", e.message);
    // One second later one request fits again.
    assert!(l.admit_local_at(&caller("d", None), 1, 1000, 0).is_ok());
}

#[test]
fn key_overrides_merge_over_the_default() {
    let l = limiter("limits:\n  per_key: { requests_per_min: 60, tokens_per_min: 100 }\n  keys: { vip: { requests_per_min: 600 } }\n");
    let needs = l.needs(&caller("vip", None), 10);
    assert_eq!(needs.len(), 2);
    assert_eq!(needs[0].per_min, 600);
    assert_eq!(needs[1].per_min, 100);
}

#[test]
fn a_key_entry_limit_wins_over_the_config_override_and_the_default() {
    let l = limiter("limits:\n  per_key: { requests_per_min: 60, tokens_per_min: 100 }\n  keys: { vip: { requests_per_min: 600, burst_requests: 5 } }\n");
    let mut vip = caller("vip", None);
    vip.limits = Some(RateLimit {
        requests_per_min: Some(6),
        ..RateLimit::default()
    });
    let needs = l.needs(&vip, 10);
    assert_eq!(needs[0].per_min, 6, "the entry's own rate");
    assert_eq!(needs[0].capacity, 5, "limits.keys.vip's burst");
    assert_eq!(needs[1].per_min, 100, "per_key's tokens");
    // Without any `limits:` section the entry's own limit still applies.
    let l = limiter("");
    assert!(!l.enabled() && l.applies(&vip));
    assert!(!l.applies(&caller("other", None)));
    vip.limits = Some(RateLimit {
        requests_per_min: Some(60),
        burst_requests: Some(1),
        ..RateLimit::default()
    });
    assert!(l.admit_local_at(&vip, 1, 0, 0).is_ok());
    assert!(l.admit_local_at(&vip, 1, 0, 0).is_err());
}

#[test]
fn a_permits_field_lines_are_its_header_fields() {
    let l = limiter(
        "limits:\n  global: { requests_per_min: 60 }\n  per_key: { tokens_per_min: 1000 }\n",
    );
    let p = l.admit_local_at(&caller("a", None), 100, 0, 0).unwrap();
    let mut lines = crate::server::lines::HeaderLines::default();
    p.write_lines(&mut lines);
    let mut from_lines = http::HeaderMap::new();
    crate::server::lines::append_to(&lines, &mut from_lines);
    assert_eq!(from_lines, p.headers());
    assert_eq!(from_lines.len(), 6, "{from_lines:?}");
    assert_eq!(from_lines["x-ratelimit-remaining-tokens"], "900");
}

#[test]
fn a_lowered_key_entry_limit_applies_to_its_live_bucket() {
    // The key file lowers key a's own burst from 10 to 1 while its bucket is live:
    // the bucket must take the new capacity at once, not keep the old one.
    let l = limiter("");
    let mut a = caller("a", None);
    a.limits = Some(RateLimit {
        requests_per_min: Some(60),
        burst_requests: Some(10),
        ..RateLimit::default()
    });
    assert!(l.admit_local_at(&a, 1, 0, 0).is_ok());
    a.limits = Some(RateLimit {
        requests_per_min: Some(1),
        burst_requests: Some(1),
        ..RateLimit::default()
    });
    let p = l.admit_local_at(&a, 1, 0, 0).unwrap();
    assert_eq!(p.headers()["x-ratelimit-limit-requests"], "1");
    let e = l.admit_local_at(&a, 1, 0, 0).unwrap_err();
    assert_eq!(e.retry_after_secs(), Some(60));
}

#[test]
fn overuse_is_charged_even_after_the_sweep_forgot_the_bucket() {
    // Key a's request outlives a refill of its bucket; meanwhile 4,096 new keys
    // make the limiter forget full buckets, a's among them. Its overuse must still
    // become debt, not vanish with the bucket.
    let l = limiter("limits:\n  per_key: { tokens_per_min: 100 }\n");
    let p = l.admit_local_at(&caller("a", None), 100, 0, 0).unwrap();
    for i in 0..SWEEP_EVERY {
        let _ = l.admit_local_at(&caller(&format!("other-{i}"), None), 1, 60_000, 0);
    }
    assert!(!l.lock().buckets.contains_key("k:a:tpm"), "swept");
    p.settle_at(Some(0), &Usage::new(250, 50), 60_000, 0);
    let e = l
        .admit_local_at(&caller("a", None), 1, 60_000, 0)
        .unwrap_err();
    assert_eq!(e.code, Some(Code::RateLimitExceeded));
}

#[test]
fn settle_refunds_unused_tokens_and_charges_overuse() {
    let l = limiter("limits:\n  per_key: { tokens_per_min: 100 }\n");
    let p = l.admit_local_at(&caller("a", None), 100, 0, 0).unwrap();
    assert_eq!(p.headers()["x-ratelimit-remaining-tokens"], "0");
    p.settle_at(Some(0), &Usage::new(10, 20), 0, 0);
    // 70 back: a request of 70 fits at once, 71 does not.
    assert!(l.admit_local_at(&caller("a", None), 71, 0, 0).is_err());
    let p = l.admit_local_at(&caller("a", None), 70, 0, 0).unwrap();
    // Used 100 more than charged: debt of 100 tokens (one minute to repay).
    p.settle_at(Some(0), &Usage::new(100, 70), 0, 0);
    let e = l.admit_local_at(&caller("a", None), 1, 0, 0).unwrap_err();
    assert_eq!(e.retry_after_secs(), Some(61));
}

#[test]
fn absurd_upstream_usage_saturates_instead_of_overflowing() {
    // An upstream reporting counts whose sum overflows u64 must neither panic nor
    // wrap around to a small total (which would refund the charged estimate).
    let l = limiter("limits:\n  per_key: { tokens_per_min: 100 }\n");
    let p = l.admit_local_at(&caller("a", None), 10, 0, 0).unwrap();
    let usage = Usage::new(u64::MAX, 2);
    assert_eq!(usage.total_tokens, u64::MAX);
    let reported = Usage {
        total_tokens: 1,
        ..usage
    };
    p.settle_at(Some(0), &reported, 0, 0);
    let e = l.admit_local_at(&caller("a", None), 1, 0, 0).unwrap_err();
    assert_eq!(e.code, Some(Code::RateLimitExceeded));
}

#[test]
fn budgets_refuse_once_spent() {
    // 1 USD per token: any usage spends the day's budget of 5 USD.
    let l = limiter(
        "budgets:\n  per_key: { usd_per_day: 5 }\n  orgs: { acme: { usd_per_month: 100 } }\n",
    );
    let p = l
        .admit_local_at(&caller("a", Some("acme")), 1, 0, 0)
        .unwrap();
    assert_eq!(p.budget_remaining, Some(5.0));
    p.settle_at(Some(0), &Usage::new(2, 2), 0, 0);
    let p = l
        .admit_local_at(&caller("a", Some("acme")), 1, 0, 0)
        .unwrap();
    assert_eq!(p.budget_remaining, Some(1.0));
    p.settle_at(Some(0), &Usage::new(1, 0), 0, 0);
    let e = l
        .admit_local_at(&caller("a", Some("acme")), 1, 0, 0)
        .unwrap_err();
    assert_eq!(e.code, Some(Code::BudgetExceeded));
    assert!(e.message.contains("API key"), "{}", e.message);
    // The next UTC day starts over; another key of the org still has the org's.
    assert!(l
        .admit_local_at(&caller("a", Some("acme")), 1, 0, 86_400)
        .is_ok());
    assert!(l
        .admit_local_at(&caller("b", Some("acme")), 1, 0, 0)
        .is_ok());
}

#[test]
fn critical_priority_bypasses_rate_limits() {
    let l = limiter("limits:\n  global: { requests_per_min: 0, burst_requests: 1 }\n");
    let mut c = caller("a", None);
    assert!(l.admit_local_at(&c, 1, 0, 0).is_ok());
    assert!(l.admit_local_at(&c, 1, 0, 0).is_err());
    c.priority = PriorityLevel::Critical;
    assert!(l.admit_local_at(&c, 1, 0, 0).is_ok());
}

#[test]
fn reset_text_is_openais_format() {
    assert_eq!(reset_text(20), "20ms");
    assert_eq!(reset_text(1000), "1s");
    assert_eq!(reset_text(360_000), "6m0s");
    assert_eq!(reset_text(3_723_000), "1h2m3s");
    assert_eq!(reset_text(0), "0ms");
    assert_eq!(reset_text(999), "999ms");
    assert_eq!(reset_text(1001), "2s");
    assert_eq!(reset_text(3_600_000), "1h0m0s");
    assert_eq!(reset_text(u64::MAX), "5124095576030h25m52s");
}

/// Admission takes from each bucket as it looks it up: a refusal by a later bucket
/// gives the earlier ones their cost back exactly, blames the longest wait, and
/// reports every bucket as it was.
#[test]
fn a_refusal_by_a_later_bucket_leaves_the_earlier_ones_as_they_were() {
    let l = limiter("limits:\n  global: { requests_per_min: 60, burst_requests: 5, tokens_per_min: 1000 }\n  per_key: { tokens_per_min: 100 }\n");
    let remaining = |views: &[View]| views.iter().map(|v| v.remaining).collect::<Vec<_>>();
    let needs = l.needs(&caller("a", None), 500);
    let keys: Vec<&str> = needs.iter().map(|n| &*n.key).collect();
    assert_eq!(keys, ["g::rpm", "g::tpm", "k:a:tpm"]);
    for _ in 0..3 {
        match l.check_local(&needs, &[], 0, 0, &[]) {
            Checked::Refused {
                wait_ms,
                blame,
                views,
            } => {
                assert_eq!(wait_ms, None, "500 tokens never fit a 100-token bucket");
                assert_eq!(blame, 2);
                assert_eq!(remaining(&views), [5, 1000, 100]);
            }
            _ => panic!("admitted 500 tokens against a 100-token bucket"),
        }
    }
    let needs = l.needs(&caller("a", None), 50);
    match l.check_local(&needs, &[], 0, 0, &[]) {
        Checked::Admitted(views, None) => assert_eq!(remaining(&views), [4, 950, 50]),
        _ => panic!("refused a request that fits every bucket"),
    }
}

#[test]
fn a_zero_rate_without_burst_refuses_every_request_naming_one_request() {
    // `requests_per_min: 0` with no burst is a bucket of no room: every request is
    // refused, without a Retry-After (waiting never helps), in singular words.
    let l = limiter("limits:\n  global: { requests_per_min: 0 }\n");
    let e = l.admit_local_at(&caller("a", None), 1, 0, 0).unwrap_err();
    assert_eq!(e.status(), 429);
    assert_eq!(e.retry_after_secs(), None);
    assert!(
        e.message
            .starts_with("This request needs 1 request, more than the global limit"),
        "{}",
        e.message
    );
    let e = l
        .admit_local_at(&caller("a", None), 1, 3_600_000, 0)
        .unwrap_err();
    assert_eq!(e.status(), 429, "an hour later still no room");
}

#[test]
fn a_budget_reservation_counts_at_admission_and_is_replaced_by_the_spend() {
    let l = limiter("budgets:\n  per_key: { usd_per_day: 1.0 }\n");
    let a = caller("a", None);
    let day = 1_709_208_000;
    // Three requests that may spend 0.4 USD each: the third finds 0.8 reserved, so
    // it still runs (it is the one that crosses), the fourth is refused.
    let permits: Vec<Permit> = (0..3)
        .map(|_| l.admit_local_reserving(&a, 0, 0.4, 0, day).unwrap())
        .collect();
    assert!((permits[0].reserved_usd() - 0.4).abs() < 1e-9);
    let e = l.admit_local_reserving(&a, 0, 0.4, 0, day).unwrap_err();
    assert_eq!(e.code, Some(Code::BudgetExceeded));
    // The first two end spending nothing (failed upstream): their reservations go
    // back, and there is room again.
    permits[0].settle_at(None, &Usage::default(), 0, day);
    permits[1].settle_at(None, &Usage::default(), 0, day);
    let p = l.admit_local_reserving(&a, 0, 0.4, 0, day).unwrap();
    assert!(
        (p.budget_remaining.unwrap() - 0.6).abs() < 1e-9,
        "{:?}",
        p.budget_remaining
    );
}

// Regression (outside attack, 2026-12-07): a request with an output cap of 9e18
// tokens reserved some 9e15 USD in the same float as the spend; adding and taking
// it off lost the 0.27 USD already spent, so the budget could be reset at will.
// Expected: reservations apart from the spend, and capped at the budget.
#[test]
fn a_huge_reservation_neither_wipes_the_spend_nor_holds_more_than_the_budget() {
    // Prices here are 1 USD a token.
    let l = limiter("budgets:\n  per_key: { usd_per_day: 300 }\n");
    let a = caller("a", None);
    let day = 1_709_208_000;
    let p = l.admit_local_reserving(&a, 0, 30.0, 0, day).unwrap();
    p.settle_at(Some(0), &Usage::new(100, 170), 0, day);
    let huge = l.admit_local_reserving(&a, 0, 9e18, 0, day).unwrap();
    assert!(
        (huge.reserved_usd() - 300.0).abs() < 1e-9,
        "{}",
        huge.reserved_usd()
    );
    huge.settle_at(None, &Usage::default(), 0, day);
    // 270 is still spent: 30 left.
    let next = l.admit_local_reserving(&a, 0, 1.0, 0, day).unwrap();
    assert!(
        (next.budget_remaining.unwrap() - 30.0).abs() < 1e-6,
        "{:?}",
        next.budget_remaining
    );
}

// Regression (outside attack, 2026-12-07): a budget held by one request in flight
// (not spent) answered "used up" with a Retry-After of hours, until UTC midnight.
#[test]
fn a_budget_held_by_requests_in_flight_is_refused_for_a_moment_not_the_day() {
    let l = limiter("budgets:\n  per_org: { usd_per_day: 100 }\n");
    let day = 1_709_208_000;
    let a = caller("a", Some("o"));
    let held = l.admit_local_reserving(&a, 0, 1e9, 0, day).unwrap();
    let e = l
        .admit_local_reserving(&caller("b", Some("o")), 0, 0.01, 0, day)
        .unwrap_err();
    assert_eq!(e.code, Some(Code::BudgetExceeded));
    assert_eq!(e.retry_after_secs(), Some(HELD_RETRY_AFTER_SECS));
    assert!(
        e.message.contains("held by requests in flight"),
        "{}",
        e.message
    );
    held.settle_at(None, &Usage::default(), 0, day);
    assert!(l
        .admit_local_reserving(&caller("b", Some("o")), 0, 0.01, 0, day)
        .is_ok());
}

// Regression (outside attack, 2026-12-07): a month whose spend (0.9 of the budget)
// was above the day's limit (0.5) but whose budget was only held by a request in
// flight was refused as "used up" until midnight: the refused month's spend was
// compared with the day's limit. (Prices here are 1 USD a token: the budget is
// scaled by 1,000.)
#[test]
fn a_held_month_is_not_reported_used_up_by_the_days_limit() {
    let l = limiter("budgets:\n  per_key: { usd_per_day: 500, usd_per_month: 1000 }\n");
    let a = caller("a", None);
    let (yesterday, today) = (1_709_208_000 - 86_400, 1_709_208_000);
    let p = l.admit_local_reserving(&a, 0, 0.0, 0, yesterday).unwrap();
    p.settle_at(Some(0), &Usage::new(400, 500), 0, yesterday);
    let _held = l.admit_local_reserving(&a, 0, 200.0, 0, today).unwrap();
    let e = l.admit_local_reserving(&a, 0, 1.0, 0, today).unwrap_err();
    assert_eq!(
        e.retry_after_secs(),
        Some(HELD_RETRY_AFTER_SECS),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("held by requests in flight"),
        "{}",
        e.message
    );
}

// Regression (outside attack, 2026-12-07): a request held for the off-peak window
// (up to `off_peak.max_wait`, 6 h by default) outlived its Redis reservation, whose
// life counted only the attempts (81 min by default), and the budget was spent
// 3.6 times over by the requests admitted after it expired.
#[test]
fn a_reservation_outlives_the_off_peak_hold_and_the_queue_waits() {
    let config = parse_str(
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\nscheduler: { off_peak: { hours: 0-6, timezone: UTC, max_wait: 6h } }\n",
        None,
    )
    .unwrap();
    let life = hold_life_ms(&config);
    // 6 h held, then 8 attempts of 600 s, each after up to 60 s queued, the waits
    // between them (the retry budget, 30 s by default), and 1 min.
    assert_eq!(
        life,
        6 * 3_600_000 + 8 * (600_000 + 60_000) + config.server.retry_budget_ms + 60_000
    );
}

// Regression (outside attack, 2026-12-07): with a key's day budget and its
// organization's month budget both spent, the refusal named the first found (the
// key's day) and said Retry-After until midnight, when the month's would still be
// spent. Expected: the longest wait, to the end of the month.
#[test]
fn a_refusal_names_the_budget_that_stays_spent_longest() {
    let l =
        limiter("budgets:\n  per_key: { usd_per_day: 300 }\n  per_org: { usd_per_month: 300 }\n");
    let a = caller("a", Some("o"));
    let noon = 1_707_566_400; // 2024-02-10T12:00:00Z
    let p = l.admit_local_reserving(&a, 0, 0.0, 0, noon).unwrap();
    p.settle_at(Some(0), &Usage::new(100, 200), 0, noon);
    let e = l.admit_local_reserving(&a, 0, 0.0, 0, noon).unwrap_err();
    assert_eq!(e.code, Some(Code::BudgetExceeded));
    assert!(e.message.contains("organization"), "{}", e.message);
    assert_eq!(
        e.retry_after_secs(),
        Some(budget::secs_to_period_end(noon, true)),
        "{}",
        e.message
    );
}
