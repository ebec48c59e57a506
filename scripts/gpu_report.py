#!/usr/bin/env python3
"""The GPU check's record (docs/gpu.md): $OUT/results.json and the same as a markdown table in $OUT/results.md.

results.json = {"part", "dry_run", "device", "commit", "torch", "started", "budget_s",
                "steps": [{"name", "status", "seconds", "command", "detail"}],
                "figures": [{"id", "name", "value", "unit", "command", "detail"}]}
status is one of ok, failed, timeout, skipped (with the reason in detail). scripts/gpu-check.sh records its steps
through the command line; benchmarks/gpu_bench.py imports this module.

Usage: gpu_report.py init <out> <part> <dry_run 0|1> <device> <commit> <torch> <budget_s>
       gpu_report.py step <out> <name> <status> <seconds> <command> [detail]
       gpu_report.py render <out>
"""
import datetime
import json
import os
import sys


def _path(out):
    return os.path.join(out, "results.json")


def load(out):
    with open(_path(out)) as f:
        return json.load(f)


def save(out, results):
    tmp = _path(out) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, _path(out))
    render(out, results)


def init(out, part, dry_run, device, commit, torch, budget_s):
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    save(out, {"part": part, "dry_run": dry_run, "device": device, "commit": commit, "torch": torch,
               "started": started, "budget_s": budget_s, "steps": [], "figures": []})


def step(out, name, status, seconds, command, detail=""):
    results = load(out)
    results["steps"].append({"name": name, "status": status, "seconds": round(float(seconds), 1),
                             "command": command, "detail": detail})
    save(out, results)


def figure(out, fid, name, value, unit, command, detail=""):
    results = load(out)
    results["figures"].append({"id": fid, "name": name, "value": value, "unit": unit, "command": command,
                               "detail": detail})
    save(out, results)


def render(out, results=None):
    r = results or load(out)
    lines = [f"# GPU check, part {r['part']}{' (dry run: CPU backend, tiny shapes)' if r['dry_run'] else ''}", "",
             f"device: {r['device']}  ", f"commit: {r['commit']}  ", f"torch: {r['torch']}  ",
             f"started: {r['started']}, budget {r['budget_s']} s", "",
             "| step | status | seconds | detail |", "|---|---|---|---|"]
    for s in r["steps"]:
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {s['detail']} |")
    if r["figures"]:
        lines += ["", "| figure | value | unit | detail |", "|---|---|---|---|"]
        for f in r["figures"]:
            value = f"{f['value']:.4g}" if isinstance(f["value"], float) else f["value"]
            lines.append(f"| {f['id']} {f['name']} | {value} | {f['unit']} | {f['detail']} |")
    lines += ["", "Commands:", ""]
    for s in r["steps"] + r["figures"]:
        if s.get("command"):
            lines.append(f"- {s.get('id', '')} {s['name']}: `{s['command']}`".replace("-  ", "- "))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    verb, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if verb == "init":
        init(out, args[0], args[1] == "1", args[2], args[3], args[4], int(args[5]))
    elif verb == "step":
        step(out, *args)
    elif verb == "render":
        render(out)
    else:
        sys.exit(f"gpu_report.py: unknown verb {verb!r} (init, step, render)")
