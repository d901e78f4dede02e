//! Scheduling benchmark (issue 15): what the dispatch phase pays per attempt for the
//! priority queues when nothing waits. Target: at most 2 µs.
//!
//! - `gate/empty`: a slot taken and freed on an endpoint with `max_in_flight` and an
//!   empty queue (one lock, two counter bumps, one gauge set each way);
//! - `gate/none`: the same call on an endpoint without `max_in_flight` (no gate);
//! - `off_peak/is_now`: `request.off_peak` for a window in `America/New_York`.
//!
//! `cargo bench --bench sched` (release profile).

use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;

use switchyard::config::parse_str;
use switchyard::policy::ast::PriorityLevel;
use switchyard::routing::Registry;
use switchyard::sched::Scheduler;

const CONFIG: &str = "providers: { p: { kind: mock } }\n\
models: { m: { endpoints: [ { provider: p, model: a, max_in_flight: 64 }, { provider: p, model: b } ] } }\n\
scheduler: { off_peak: { hours: 1-5, timezone: America/New_York } }\n";

fn main() {
    let config = parse_str(CONFIG, None).expect("config");
    let registry = Registry::from_config(&config, |_| Some(0));
    let sched = Arc::new(Scheduler::new(&config.scheduler, &registry));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("gate/empty", |b| {
        b.iter(|| {
            rt.block_on(async {
                let slot = sched.acquire(0, black_box(PriorityLevel::Normal)).await;
                black_box(slot.expect("slot"));
            })
        })
    });
    c.bench_function("gate/none", |b| {
        b.iter(|| {
            rt.block_on(async {
                let slot = sched.acquire(1, black_box(PriorityLevel::Normal)).await;
                black_box(slot.expect("no gate"));
            })
        })
    });
    c.bench_function("off_peak/is_now", |b| {
        b.iter(|| black_box(sched.off_peak_now()))
    });
    c.final_summary();
}
