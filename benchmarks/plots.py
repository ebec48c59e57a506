"""The benchmark plots (PNG, docs/img/): a real RoundPipe run's Gantt chart next to the simulated one, and the
bubble breakdown of every schedule in a simulator study; or the loss curves of the staleness study.
Usage: .venv/bin/python benchmarks/plots.py <run output dir> <roundpipe_sim binary> <out dir>
       .venv/bin/python benchmarks/plots.py staleness <curves dir (benchmarks/staleness.sh)> <out dir>
The run must be a RoundPipe run of >= 6 steps (it provides trace.json and profile.json).
"""
import json
import os
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"fwd": "#457b9d", "fused": "#f4a261", "bwd": "#2a9d8f", "recompute": "#8ab17d"}


def kind(name):
    for k in COLORS:
        if name.startswith(k):
            return k
    return None


def real_ops(run, steps):
    """Compute spans of the given steps: (worker, start ms, end ms, kind), time from the first one."""
    events = json.load(open(os.path.join(run, "trace.json")))["traceEvents"]
    ops = []
    for e in events:
        if e.get("cat") != "compute" or e.get("ph") != "X":
            continue
        if not any(f"(step {s})" in e["name"] for s in steps):
            continue
        ops.append((e["pid"], e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3, kind(e["name"])))
    t0 = min(o[1] for o in ops)
    return [(w, a - t0, b - t0, k) for w, a, b, k in ops]


def sim_json(sim, args):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        subprocess.run([sim, *args, "--json", path], check=True, stdout=subprocess.DEVNULL)
        return json.load(open(path))


def gantt(ax, ops, workers, title):
    for w, a, b, k in ops:
        ax.barh(w, b - a, left=a, color=COLORS.get(k, "#999999"), edgecolor="white", height=0.8)
    ax.set_yticks(range(workers))
    ax.set_yticklabels([f"worker {w}" for w in range(workers)])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title, fontsize=10)


def staleness(curves, out):
    """One panel per learning rate: the 10-step mean training loss of every staleness."""
    runs = {}
    for name in sorted(os.listdir(curves)):
        lr, k = name[len("lr"):-len(".jsonl")].split("-k")
        rows = [json.loads(l) for l in open(os.path.join(curves, name))]
        runs.setdefault(lr, {})[int(k)] = [r["loss"] for r in rows if r.get("loss") is not None]
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.6), squeeze=False)
    for ax, lr in zip(axes[0], sorted(runs, key=float)):
        for k, losses in sorted(runs[lr].items()):
            smooth = [sum(losses[max(0, i - 9):i + 1]) / len(losses[max(0, i - 9):i + 1]) for i in range(len(losses))]
            ax.plot(range(1, len(losses) + 1), smooth, label="sync" if k == 0 else f"staleness {k}", linewidth=1.2)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (10-step mean)")
        ax.set_title(f"tiny-finetune, 2 workers, lr {lr} (cosine)", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "staleness_loss.png"), dpi=110)
    print(f"wrote {out}/staleness_loss.png")


def main():
    if sys.argv[1] == "staleness":
        staleness(sys.argv[2], sys.argv[3])
        return
    run, sim, out = sys.argv[1:4]
    profile = json.load(open(os.path.join(run, "profile.json")))
    w, m = profile["workers"], profile["microbatches"]
    real = real_ops(run, [4, 5])
    simulated = sim_json(sim, ["--profile", os.path.join(run, "profile.json"), "--workers", str(w), "--microbatches",
                               str(m), "--rounds", "2", "--schedule", "roundpipe", "--plan", profile["plan"]])
    sim_ops = [(o["worker"], o["start"], o["end"],
                "fused" if o["label"].startswith("T") else "recompute" if o["label"].startswith("R")
                else ("bwd" if o["backward"] else "fwd")) for o in simulated["ops"]]
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.2), sharex=True)
    gantt(axes[0], real, w, f"measured: steps 4-5 of a {w}-worker CPU run (compute spans)")
    gantt(axes[1], sim_ops, w, f"simulated from the run's profile: 2 rounds, bubble {100 * simulated['bubble_ratio']:.1f}%")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, ["forward", "fused (head + loss)", "backward (+ recompute when not ahead)", "recompute ahead"],
               loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "gantt_real_vs_sim.png"), dpi=110)

    study = ["--workers", "8", "--layers", "28", "--microbatches", "16", "--rounds", "2", "--fwd", "1", "--bwd", "2",
             "--head-fwd", "3", "--head-bwd", "6", "--hop", "0.1", "--recompute-baselines"]
    names = ["gpipe", "1f1b", "interleaved-1f1b", "roundpipe"]
    parts = ["fill", "switch", "drain", "intra"]
    data = {n: sim_json(sim, study + ["--schedule", n])["bubble"] for n in names}
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(names)
    for p, color in zip(parts, ["#264653", "#e9c46a", "#e76f51", "#8ab17d"]):
        values = [100 * data[n][p] for n in names]
        ax.bar(names, values, bottom=bottom, color=color, label=p)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("% of makespan x workers")
    ax.set_title("Bubble breakdown, simulated: 8 workers, 28 layers, head = 3 layers, 32 microbatches", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bubble_breakdown.png"), dpi=110)
    print(f"wrote {out}/gantt_real_vs_sim.png and {out}/bubble_breakdown.png")


if __name__ == "__main__":
    main()
