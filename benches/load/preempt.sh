#!/usr/bin/env bash
# Who takes the CPU from the gateway, and what the switches cost: the setup of
# run.sh (every feature on), the gateway alone in front of the static upstream, one
# `wrk -t2 -c64` JSON run per configuration. For each, `perf sched record` over one
# second of the load counts how each gateway thread left its CPU per request:
# preempted (still runnable, by which task) or asleep; then `perf record -e
# cpu-clock` over the whole run gives the gateway's CPU per request in the kernel's
# context switch (`finish_task_switch`, where a guest's samples of a switch land)
# and in all. On a 2-core machine shared with wrk and the upstream, a gateway
# thread that writes an answer wakes a wrk thread on its own core, which preempts
# it; one serving thread leaves the other core free for them.
# Usage: benches/load/preempt.sh [seconds]; THREADS ("default 1": the values of
# `server.threads` to compare, `default` leaving it unset), SWITCHYARD_BIN.
# Needs: perf (with tracepoints and kernel symbols), wrk, nginx, python3, a release
# build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
for threads in ${THREADS:-default 1}; do
  (
    [ "$threads" = default ] || export SY_SERVER="threads: $threads"
    . benches/load/setup.sh
    start_upstream ""
    start_gateway ""
    check_gateway 100
    echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); threads: $threads; wrk -t2 -c64 -d${secs}s; $bin"
    wrk -t2 -c64 -d1s -s "$work/json.lua" "$(url switchyard json)" >/dev/null # warm-up
    # The switches: one second in the middle of a run.
    wrk -t2 -c64 -d3s -s "$work/json.lua" "$(url switchyard json)" >"$work/wrk1.txt" &
    load=$!
    sleep 1
    perf sched record -o "$work/sched.data" -- sleep 1 >/dev/null 2>&1
    wait $load
    # The samples: the whole of a second run.
    perf record -e cpu-clock -F 4000 -p "$gpid" -o "$work/clock.data" -- sleep "$secs" >/dev/null 2>&1 &
    rec=$!
    sleep 0.2
    wrk -t2 -c64 -d"${secs}s" -s "$work/json.lua" "$(url switchyard json)" >"$work/wrk2.txt"
    wait $rec || true
    perf script -i "$work/sched.data" -F event,trace 2>/dev/null | grep sched_switch >"$work/switches.txt" || true
    perf report -i "$work/clock.data" --no-children --sort sym --stdio -F sample,sym 2>/dev/null >"$work/clock.txt" || true
    python3 - "$work" "$gpid" "$secs" <<'PY'
import collections, re, sys
work, gpid, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
def rate(path):  # requests per second of a wrk output
    for line in open(path):
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    return 0.0
# Switches of the gateway's threads (named switchyard-core-N) in the one second.
out, by = collections.Counter(), collections.Counter()
pat = re.compile(r"prev_comm=(\S+) prev_pid=\d+ prev_prio=\d+ prev_state=(\S+) ==> next_comm=(\S+)")
for line in open(f"{work}/switches.txt"):
    m = pat.search(line)
    if not m or not m.group(1).startswith("switchyard-core"):
        continue
    preempted = m.group(2).startswith("R")
    out["preempted" if preempted else "asleep"] += 1
    if preempted:
        by[m.group(3)] += 1
reqs = rate(f"{work}/wrk1.txt")  # the one second recorded
print(f"## switches of the serving threads per request: preempted {out['preempted'] / reqs:.3f}, asleep {out['asleep'] / reqs:.3f}")
print("   preempted by: " + ", ".join(f"{k} {v / reqs:.3f}" for k, v in by.most_common(4)))
# Samples of the whole run, 250 us each at 4 kHz.
samples = collections.Counter()
for line in open(f"{work}/clock.txt"):
    parts = line.split(None, 1)
    if len(parts) == 2 and parts[0].isdigit():
        samples[parts[1].strip()] += int(parts[0])
reqs = rate(f"{work}/wrk2.txt") * secs
us = lambda n: n * 250 / reqs
switch = sum(v for k, v in samples.items() if "finish_task_switch" in k)
kernel = sum(v for k, v in samples.items() if k.startswith("[k]"))
print(f"## CPU per request (samples): {us(sum(samples.values())):.1f} us in all, kernel {us(kernel):.1f} us, of which the context switch (finish_task_switch) {us(switch):.1f} us")
PY
  )
done
