#!/usr/bin/env python3
"""Top functions of a callgrind dump, per request: exclusive (self) and inclusive
instructions divided by the number of requests served while it was recorded.

Usage: benches/load/cgtop.py DUMP REQUESTS [TOP] [--callers NAME,NAME] [--misses]
(--misses, for a dump made with `--cache-sim=yes`: first-level instruction and
data cache misses per request, in all and by function, instead of the listings.)
(callgrind.sh calls it; callgrind_annotate mixes inclusive costs into its self
listing for dumps taken after `callgrind_control -z`, hence this reader.)
Inclusive cost is the function's own plus its calls', so recursive and mutually
recursive frames may count twice; read it for the request path's phases."""
import collections
import re
import sys


def read(path):
    names, self_cost, calls = {}, collections.Counter(), collections.Counter()
    fn = cfn = call = None

    def name(tok):
        m = re.match(r"^\((\d+)\)(?: (.*))?$", tok)
        if not m:
            return tok
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("fn="):
            fn = name(line[3:])
        elif line.startswith("cfn="):
            cfn = name(line[4:])
        elif line.startswith("calls="):
            call = cfn
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) < 2:
                continue
            cost = int(parts[1])
            if call is not None:
                if call != fn:
                    calls[(fn, call)] += cost
                call = None
            else:
                self_cost[fn] += cost
    return self_cost, calls


def misses(path, requests, top):
    """Prints the I1 and D1 misses per request of a `--cache-sim=yes` dump: totals
    from its summary line, then the functions with the most I1 misses (self)."""
    events, per_fn, fn, call = [], collections.defaultdict(lambda: [0] * 9), None, False
    names = {}
    for line in open(path, errors="replace"):
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("fn=", "cfn=")):
            m = re.match(r"^\((\d+)\)(?: (.*))?$", line.split("=", 1)[1].strip())
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("fn="):
                fn = names.get(m.group(1), m.group(1)) if m else line[3:].strip()
        elif line.startswith("calls="):
            call = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if call:
                call = False
                continue
            for i, v in enumerate(line.split()[1:]):
                per_fn[fn][i] += int(v)
    if "I1mr" not in events:
        sys.exit("no cache events in the dump: record it with --cache-sim=yes")
    at = {e: i for i, e in enumerate(events)}
    total = lambda e: sum(c[at[e]] for c in per_fn.values()) / requests
    print(f"cache misses per request: I1 {total('I1mr'):,.0f}, D1 read {total('D1mr'):,.0f}, "
          f"D1 write {total('D1mw'):,.0f}, last level {total('ILmr') + total('DLmr') + total('DLmw'):,.0f} "
          f"({total('Ir'):,.0f} instructions)")
    print(f"functions by I1 misses per request (self), top {top}:")
    ranked = sorted(per_fn.items(), key=lambda x: -x[1][at["I1mr"]])
    for f, c in ranked[:top]:
        d1 = (c[at["D1mr"]] + c[at["D1mw"]]) / requests
        print(f"{c[at['I1mr']] / requests:>8,.0f} I1 {c[at['Ir']] / requests:>9,.0f} Ir {d1:>6,.0f} D1  {f[:120]}")


def main():
    args = sys.argv[1:]
    if "--misses" in args:
        args.remove("--misses")
        misses(args[0], int(args[1]), int(args[2]) if len(args) > 2 else 25)
        return
    callers = []
    if "--callers" in args:
        i = args.index("--callers")
        callers = args[i + 1].split(",")
        del args[i : i + 2]
    path, requests = args[0], int(args[1])
    top = int(args[2]) if len(args) > 2 else 25
    self_cost, calls = read(path)
    total = sum(self_cost.values())
    inclusive = collections.Counter(self_cost)
    for (f, _), c in calls.items():
        inclusive[f] += c
    row = lambda c, f: f"{c / requests:>10,.0f} {100 * c / total:6.2f}%  {f[:150]}"
    print(f"instructions per request by function (self), top {top}:")
    for f, c in self_cost.most_common(top):
        print(row(c, f))
    print(f"instructions per request by function (inclusive), top {top} under the request path:")
    shown = 0
    for f, c in inclusive.most_common():
        if shown == top:
            break
        if any(k in f for k in ("switchyard::", "hyper", "tracing")):
            print(row(c, f))
            shown += 1
    for target in callers:
        print(f"callers of {target}:")
        for (f, cf), c in sorted(calls.items(), key=lambda x: -x[1]):
            if cf == target and c / requests >= 1:
                print(row(c, f))


if __name__ == "__main__":
    main()
