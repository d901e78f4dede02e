#!/usr/bin/env bash
# Which connections the gateway closes when it runs out of file descriptors (the
# reclaim of `server.first_byte_timeout_ms`'s README row), under a mixed overload:
# Switchyard (every feature on, as run.sh) runs under `ulimit -n LIMIT`; BUSY wrk
# keep-alive clients send JSON requests back to back (accepted first); then an idle
# pool of keep-alive connections (one request each, then silent, as an SDK's pool)
# takes every descriptor left; then a one-shot client arrives every 20 ms for SECS
# seconds, each needing a descriptor. Prints the one-shot results, how many of the
# idle pool the gateway closed, and wrk's totals (its read errors are busy clients
# whose connection was closed under them). Closing the idle ones, as nginx drains
# its reusable connections least recently used first, loses nothing.
#
# Usage: benches/load/reclaim.sh; environment LIMIT (256), BUSY (24), SECS (6),
# SWITCHYARD_BIN. Needs: wrk, nginx, python3, prlimit, a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=${LIMIT:-256}; busy=${BUSY:-24}; secs=${SECS:-6}
. benches/load/setup.sh
start_upstream ""
start_gateway "prlimit --nofile=$limit:$limit"
check_gateway 100
wrk -t1 -c"$busy" -d"$((secs + 4))"s -s "$work/json.lua" "$(url switchyard json)" >"$work/wrk.out" 2>&1 &
wrk_pid=$!
sleep 1
python3 - "$gpid" "$limit" "$gport" "$key" "$secs" <<'PY'
import os, socket, sys, time
pid, limit, port, key, secs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
body = b'{"model":"bench","messages":[{"role":"user","content":"hi"}]}'
req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
       b"authorization: Bearer " + key.encode() + b"\r\ncontent-length: " + str(len(body)).encode()
       + b"\r\n\r\n" + body)

def status(s):
    """The status of one answer read whole (Content-Length framing), or None at EOF."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            return None
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length"))
    while len(rest) < length:
        d = s.recv(65536)
        if not d:
            return None
        rest += d
    return head.split(b" ")[1]

fds = lambda: len(os.listdir(f"/proc/{pid}/fd"))
pool = []
while fds() < limit:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(req)
    if status(s) != b"200":
        break
    pool.append(s)
print(f"idle pool: {len(pool)} connections, gateway descriptors {fds()} of {limit}")
ok = failed = 0
took = []
end = time.time() + secs
while time.time() < end:
    t = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(req)
        if status(s) == b"200":
            ok += 1
            took.append(time.time() - t)
        else:
            failed += 1
        s.close()
    except OSError:
        failed += 1
    time.sleep(0.02)
took.sort()
closed = 0
for s in pool:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
p50 = 1000 * took[len(took) // 2] if took else 0
print(f"one-shot clients: {ok} answered, {failed} failed, p50 {p50:.1f} ms; idle pool closed by the gateway: {closed} of {len(pool)}")
PY
wait "$wrk_pid" || true
grep -E "requests in|Socket errors|Non-2xx" "$work/wrk.out"
