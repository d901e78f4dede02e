//! L1-only behaviour of [`Cache`] (Redis: `tests/cache.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use super::{Cache, Settings, Tier};

const HOUR: Duration = Duration::from_secs(3600);

fn cache(capacity: u64) -> Cache {
    Cache::new(&Settings {
        capacity,
        ..Settings::default()
    })
    .unwrap()
}

#[tokio::test]
async fn identical_normalized_text_is_an_exact_hit_a_synonym_a_semantic_one() {
    let c = cache(100);
    let k = c.key(1, "Explain how ocean tides work.", false);
    c.put(&k, Bytes::from_static(b"answer"), HOUR).await;
    let hit = c
        .get(&c.key(1, "  EXPLAIN how ocean\ttides work ", false))
        .await
        .unwrap();
    assert_eq!((hit.distance, hit.tier), (None, Tier::L1));
    assert_eq!(&hit.payload[..], b"answer");
    let hit = c
        .get(&c.key(1, "Describe how ocean tides work?", false))
        .await
        .unwrap();
    assert_eq!(hit.distance, Some(0));
    assert_eq!(c.counters().exact_hits.load(Ordering::Relaxed), 1);
    assert_eq!(c.counters().semantic_hits.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn near_duplicates_that_change_the_answer_miss() {
    let c = Cache::new(&Settings {
        tau: 6,
        ..Settings::default()
    })
    .unwrap();
    let text = "Summarize the minutes of the board meeting held on March 3, 2021, where the \
        committee reviewed the quarterly figures, discussed the marketing budget, postponed \
        the hiring plan and approved the warehouse upgrade after a long debate about costs. \
        Revenue in the northern region grew while costs stayed flat. Several members asked \
        for a clearer breakdown of the marketing spend. The chair proposed moving the product \
        launch to the following quarter. Customer complaints about delivery times fell for \
        the third month. The finance team flagged a currency risk in the southern contracts. \
        An external auditor will visit the main office next spring. The board thanked the \
        outgoing treasurer for her years of service. Minutes of the previous meeting were \
        approved without changes. The warehouse upgrade finished two weeks ahead of schedule.";
    c.put(&c.key(1, text, false), Bytes::from_static(b"x"), HOUR)
        .await;
    for other in [
        text.replacen("March 3", "March 4", 1),
        text.replacen("approved the", "did not approve the", 1),
        text.replacen("Summarize", "Summarize briefly", 1),
    ] {
        let k = c.key(1, &other, false);
        // Close enough to be nominated, so verification is what refuses it.
        let d = (k.simhash() ^ c.key(1, text, false).simhash()).count_ones();
        assert!(d <= 6, "{other}: distance {d}");
        assert!(c.get(&k).await.is_none(), "{other} (distance {d})");
    }
    assert!(
        c.get(&c.key(2, text, false)).await.is_none(),
        "another scope"
    );
    assert_eq!(c.counters().misses.load(Ordering::Relaxed), 4);
}

#[tokio::test]
async fn an_exact_key_hits_the_identical_raw_text_only() {
    let c = cache(100);
    c.put(
        &c.key(1, "Hello  World", true),
        Bytes::from_static(b"x"),
        HOUR,
    )
    .await;
    assert!(c.get(&c.key(1, "Hello  World", true)).await.is_some());
    assert!(c.get(&c.key(1, "hello world", true)).await.is_none());
    assert!(
        c.get(&c.key(1, "Hello  World", false)).await.is_none(),
        "not served to a semantic key"
    );
    c.put(
        &c.key(1, "Hello  World", false),
        Bytes::from_static(b"y"),
        HOUR,
    )
    .await;
    assert!(
        c.get(&c.key(1, "hello world!", true)).await.is_none(),
        "nor the reverse"
    );
}

#[tokio::test]
async fn evictions_keep_the_index_and_byte_count_in_step() {
    let c = cache(50);
    for i in 0..1000 {
        let k = c.key(1, &format!("question number {i} about tides"), false);
        c.put(&k, Bytes::from(vec![0u8; 10]), HOUR).await;
    }
    c.l1().settle();
    let held = c.l1().len();
    assert!(held <= 50, "{held}");
    assert_eq!(c.l1().index().len() as u64, held);
    let counters = c.counters();
    assert_eq!(counters.bytes.load(Ordering::Relaxed), held_bytes(&c));
    assert_eq!(counters.inserts.load(Ordering::Relaxed), 1000);
    assert_eq!(counters.evictions.load(Ordering::Relaxed), 1000 - held);
}

/// Found by audit (2026-12-05): the in-memory tier was bounded by entries only
/// (10,000 by default, each up to 1 MiB: about 10 GiB). `max_bytes` bounds the bytes
/// too; with small entries `capacity` still bounds the count.
#[tokio::test]
async fn the_in_memory_tier_is_bounded_in_bytes_as_well_as_entries() {
    let c = one_mib_cache();
    for i in 0..200 {
        let k = c.key(1, &format!("question number {i} about tides"), false);
        c.put(&k, Bytes::from(vec![0u8; 64 * 1024]), HOUR).await;
    }
    c.l1().settle();
    let held = c.l1().len();
    let bytes = c.counters().bytes.load(Ordering::Relaxed);
    assert!(bytes <= 1 << 20, "{bytes} bytes in {held} entries");
    assert!(held > 0 && held < 16, "{held}");
    assert_eq!(c.l1().index().len() as u64, held);
}

/// A cache of at most 1,000 entries and 1 MiB.
fn one_mib_cache() -> Cache {
    Cache::new(&Settings {
        capacity: 1_000,
        max_bytes: 1 << 20,
        ..Settings::default()
    })
    .unwrap()
}

/// What the entries held occupy, counted field by field.
fn held_bytes(c: &Cache) -> u64 {
    c.l1()
        .entries()
        .iter()
        .map(|e| {
            let canon = e.canon.as_ref().map_or(0, |c| c.content.len());
            (e.payload.len() + e.text.len() + canon) as u64
        })
        .sum()
}

/// Found by attack (t_mem.py): an entry keeps its prompt twice (normalized, and the
/// canonical content verification compares), and the weigher counted one copy, so
/// long prompts with short answers filled about twice `max_bytes` (32 MiB: RSS
/// 17 -> 89 MiB), and `switchyard_cache_bytes` counted answers only.
#[tokio::test]
async fn l1_memory_counts_both_copies_of_the_prompt() {
    let c = one_mib_cache();
    for i in 0..60 {
        // About 64 KiB of distinct words, a 10-byte answer.
        let prompt: String = (0..8_000).map(|w| format!("w{} ", w * 7 + i)).collect();
        let k = c.key(1, &prompt, false);
        c.put(&k, Bytes::from(vec![0u8; 10]), HOUR).await;
    }
    c.l1().settle();
    let held = held_bytes(&c);
    assert!(!c.l1().is_empty());
    assert!(
        held <= 1 << 20,
        "{held} bytes held in {} entries",
        c.l1().len()
    );
    assert_eq!(c.counters().bytes.load(Ordering::Relaxed), held);
}

#[tokio::test]
async fn an_entry_expires_after_its_own_ttl() {
    let c = cache(100);
    c.put(
        &c.key(1, "short lived", false),
        Bytes::from_static(b"x"),
        Duration::from_millis(1),
    )
    .await;
    c.put(
        &c.key(1, "long lived", false),
        Bytes::from_static(b"y"),
        HOUR,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(c.get(&c.key(1, "short lived", false)).await.is_none());
    assert!(c.get(&c.key(1, "long lived", false)).await.is_some());
    // Moka's timer wheel removes expired entries (and calls the listener) by ticks
    // of about a second; until then `get` already refuses them.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    c.l1().settle();
    assert_eq!(c.l1().index().len(), 1);
    assert_eq!(c.counters().evictions.load(Ordering::Relaxed), 1);
    // "long lived": the 1-byte answer and its prompt in both forms.
    assert_eq!(c.counters().bytes.load(Ordering::Relaxed), 1 + 10 + 10);
    c.put(
        &c.key(1, "no time", false),
        Bytes::from_static(b"z"),
        Duration::ZERO,
    )
    .await;
    assert!(c.get(&c.key(1, "no time", false)).await.is_none());
}

#[tokio::test]
async fn storing_a_text_again_replaces_its_entry() {
    let c = cache(100);
    let k = c.key(1, "Explain how tides work", false);
    c.put(&k, Bytes::from_static(b"first"), HOUR).await;
    c.put(&k, Bytes::from_static(b"second!"), HOUR).await;
    c.l1().settle();
    assert_eq!((c.l1().len(), c.l1().index().len()), (1, 1));
    // "second!" and "explain how tides work" normalized and canonical.
    assert_eq!(c.counters().bytes.load(Ordering::Relaxed), held_bytes(&c));
    assert_eq!(c.l1().entries()[0].payload.len(), 7);
    assert_eq!(c.counters().evictions.load(Ordering::Relaxed), 0);
    let hit = c
        .get(&c.key(1, "describe how tides work", false))
        .await
        .unwrap();
    assert_eq!(&hit.payload[..], b"second!");
}

#[tokio::test]
async fn a_leading_decimal_point_is_not_a_hit_on_the_bare_number() {
    // Found by audit (2026-12-05): normalization dropped the `.` of `.5`, so these
    // prompts shared one entry (an exact hit, no verification).
    let c = cache(100);
    for (stored, asked) in [
        ("What is 5 times 4?", "What is .5 times 4?"),
        ("Is .25 less than .3?", "Is 25 less than 3?"),
    ] {
        c.put(&c.key(1, stored, false), Bytes::from_static(b"x"), HOUR)
            .await;
        assert!(c.get(&c.key(1, asked, false)).await.is_none(), "{asked}");
    }
}
