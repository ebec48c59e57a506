#!/usr/bin/env python3
"""Runtime overhead per stage job, from a run's merged trace (<output.dir>/trace.json): for every "job" span,
its wall time minus the compute, wait, upload and download spans inside it on the same rank — the time the
runtime itself spends between them (bookkeeping, readiness messages, arena copies). Prints the distribution.
Usage: benchmarks/job_overhead.py <trace.json>"""
import json
import statistics
import sys

events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
overheads = []
for job in (e for e in events if e["cat"] == "job"):
    start, end = job["ts"], job["ts"] + job["dur"]
    inside = sum(e["dur"] for e in events
                 if e["pid"] == job["pid"] and e["tid"] == 0 and e["cat"] in ("compute", "wait", "upload", "download")
                 and e["ts"] >= start and e["ts"] + e["dur"] <= end)
    overheads.append(job["dur"] - inside)
overheads.sort()
print(f"{len(overheads)} stage jobs: runtime overhead per job median {statistics.median(overheads):.0f} us, "
      f"p90 {overheads[int(0.9 * (len(overheads) - 1))]:.0f} us, max {overheads[-1]:.0f} us")
