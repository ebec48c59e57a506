#!/usr/bin/env python3
"""benchmarks/gpu_bench.py's duel() against every pair of limits on a grid: each system trains exactly the
lengths up to its limit, and the verdict must be what the limits say at the duel's resolution (the grain), or
undecided only when time ran out; the rungs it spends are bounded, and the reference runs first at each length."""
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
from gpu_bench import duel  # noqa: E402

GRAIN, START, SEQ_MAX = 2048, 81920, 131072


def truth(ours, peer):
    """What the limits say, at the grain: a length in the grain's multiples that one trains and the other not."""
    o, p = min(ours, SEQ_MAX) // GRAIN, min(peer, SEQ_MAX) // GRAIN
    return "ours" if o > p else "peer" if p > o else "tie"


failures, most = [], 0
limits = [0, 1000, 2048, 30000, 73000, 73728, 81919, 81920, 90000, 100000, 131071, 131072, 200000]
for ours, peer in itertools.product(limits, limits):
    probes = []

    def fits(system, tokens):
        probes.append((system, tokens))
        return tokens <= (ours if system == "ours" else peer)

    verdict, why = duel(fits, START, GRAIN, SEQ_MAX)
    most = max(most, len(probes))
    want = truth(ours, peer)
    if ours < GRAIN and peer < GRAIN:
        want = None  # neither trains the shortest length tried: nothing to compare
    if verdict != want:
        failures.append(f"ours {ours}, reference {peer}: {verdict} ({why}), expected {want}; rungs {probes}")
    if any(t % GRAIN or t > SEQ_MAX for _, t in probes):
        failures.append(f"ours {ours}, reference {peer}: a rung off the grain or past the cap: {probes}")
    for i, (system, tokens) in enumerate(probes):
        if system == "ours" and ("peer", tokens) not in probes[:i]:
            failures.append(f"ours {ours}, reference {peer}: ours ran {tokens} before the reference: {probes}")
    if len(probes) != len(set(probes)):
        failures.append(f"ours {ours}, reference {peer}: a rung ran twice: {probes}")

# Out of time (the runner says None): undecided, and it stops at once.
calls = []
verdict, why = duel(lambda system, tokens: calls.append(system) or (None if system == "ours" else False),
                    START, GRAIN, SEQ_MAX)
if verdict is not None or calls != ["peer", "ours"]:
    failures.append(f"no time left for our rung: {verdict} ({why}) after {calls}")

# The expected case: the reference stops near 73k (the RoundPipe paper's figure), ours trains more: two rungs.
probes = []
verdict, _ = duel(lambda system, tokens: probes.append(system) or tokens <= (131072 if system == "ours" else 73728),
                  START, GRAIN, SEQ_MAX)
if verdict != "ours" or len(probes) != 2:
    failures.append(f"ours 131072 against 73728: {verdict} in {len(probes)} rungs, expected ours in 2")

if most > 20:
    failures.append(f"up to {most} rungs for one pair: a bisection over 131072 / 2048 needs at most ~16")
if failures:
    print("FAIL:\n" + "\n".join(failures[:20]))
    sys.exit(1)
print(f"ok: {len(limits) ** 2} pairs of limits decided as they say, at most {most} rungs; out of time is undecided")
