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


def read(path, event=None):
    """Self and call costs by function of one event (`Ir` unless named; the dump's
    `events:` line gives the columns)."""
    names, self_cost, calls = {}, collections.Counter(), collections.Counter()
    fn = cfn = call = None
    column = 1

    def name(tok):
        m = re.match(r"^\((\d+)\)(?: (.*))?$", tok)
        if not m:
            return tok
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("events:") and event is not None:
            events = line.split()[1:]
            if event not in events:
                sys.exit(f"no {event} in the dump (cache events need --cache-sim=yes)")
            column = 1 + events.index(event)
        elif line.startswith("fn="):
            fn = name(line[3:])
        elif line.startswith("cfn="):
            cfn = name(line[4:])
        elif line.startswith("calls="):
            call = cfn
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            # Trailing zero costs may be left out of a line.
            cost = int(parts[column]) if len(parts) > column else 0
            if call is not None:
                if call != fn:
                    calls[(fn, call)] += cost
                call = None
            else:
                self_cost[fn] += cost
    return self_cost, calls


def misses(path, requests, top):
    """Prints the I1 and D1 misses per request of a `--cache-sim=yes` dump, in all
    and for the functions with the most I1 misses (self)."""
    per = {e: read(path, e)[0] for e in ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")}
    total = lambda e: sum(per[e].values()) / requests
    last = total("ILmr") + total("DLmr") + total("DLmw")
    print(f"cache misses per request: I1 {total('I1mr'):,.0f}, D1 read {total('D1mr'):,.0f}, "
          f"D1 write {total('D1mw'):,.0f}, last level {last:,.0f} ({total('Ir'):,.0f} instructions)")
    print(f"functions by I1 misses per request (self), top {top}:")
    for f, c in per["I1mr"].most_common(top):
        d1 = (per["D1mr"][f] + per["D1mw"][f]) / requests
        print(f"{c / requests:>8,.0f} I1 {per['Ir'][f] / requests:>9,.0f} Ir {d1:>6,.0f} D1  {f[:120]}")


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
