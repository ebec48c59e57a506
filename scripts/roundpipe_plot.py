#!/usr/bin/env python3
"""roundpipe_plot: a run's curves from its metrics.jsonl as one PNG (docs/metrics.md, "Plots"): training loss
with the evaluation loss, throughput (tokens/s, and MFU where the run knew the peak), learning rate and gradient
norm, against the step.

Usage: .venv/bin/python scripts/roundpipe_plot.py <output.dir | metrics.jsonl> [-o PNG] [--title TEXT]
Writes <output.dir>/metrics.png unless -o is given, and prints what it drew. Exit 1 with a message naming the
file and line for a file it cannot read; 2 for a usage error.
"""
import argparse
import json
import math
import os
import sys


def fail(message):
    print(f"roundpipe_plot: {message}", file=sys.stderr)
    sys.exit(1)


def read_metrics(path):
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror} (expected a run's metrics.jsonl or its output directory)")
    steps = []
    last = max((n for n, line in enumerate(lines, 1) if line.strip()), default=0)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == last and line.lstrip().startswith("{"):  # cut short by a full disk or a crash mid-write
                print(f"{path}:{number}: skipped: a torn last line ({e.msg})", file=sys.stderr)
                break
            fail(f"{path}:{number}: not a JSON object: {e.msg}")
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            fail(f"{path}:{number}: expected an object with an integer 'step' (docs/metrics.md)")
        steps.append(record)
    if not steps:
        fail(f"{path}: no steps (the run wrote no metrics yet)")
    return steps


def series(steps, field):
    """(steps, values) where the field is a finite number."""
    points = [(s["step"], s[field]) for s in steps
              if isinstance(s.get(field), (int, float)) and math.isfinite(s[field])]
    return [p[0] for p in points], [p[1] for p in points]


def main():
    parser = argparse.ArgumentParser(prog="roundpipe_plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run's output.dir, or its metrics.jsonl")
    parser.add_argument("-o", "--output", help="the PNG to write (default: metrics.png beside metrics.jsonl)")
    parser.add_argument("--title", help="the figure's title (default: the run's directory)")
    args = parser.parse_args()
    path = os.path.join(args.run, "metrics.jsonl") if os.path.isdir(args.run) else args.run
    steps = read_metrics(path)
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(path)), "metrics.png")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # An emulated device's run (docs/emulated.md): its losses are synthetic and its rates a model's; the figure says so.
    emulated = sorted({s["device"] for s in steps if str(s.get("device", "")).startswith("emulated:")})
    mark = f" ({', '.join(emulated)}: synthetic losses, modelled rates)" if emulated else ""
    fig, (ax_loss, ax_speed, ax_lr) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    fig.suptitle((args.title or os.path.basename(os.path.dirname(os.path.abspath(path)))) + mark, fontsize=11)
    drawn = []

    x, y = series(steps, "loss")
    ax_loss.plot(x, y, color="#457b9d", linewidth=1.2, label="train loss")
    drawn.append(f"loss {len(x)}")
    x, y = series(steps, "eval_loss")
    if x:
        ax_loss.plot(x, y, "o-", color="#e76f51", markersize=4, label="eval loss")
        drawn.append(f"eval_loss {len(x)}")
    ax_loss.set_ylabel("loss")
    ax_loss.legend(loc="upper right", fontsize=8)
    ax_loss.grid(alpha=0.3)

    x, y = series(steps, "tokens_per_s")
    ax_speed.plot(x, y, color="#2a9d8f", linewidth=1.2)
    drawn.append(f"tokens_per_s {len(x)}")
    ax_speed.set_ylabel("tokens/s")
    ax_speed.grid(alpha=0.3)
    x, y = series(steps, "mfu")
    if x:
        ax_mfu = ax_speed.twinx()
        ax_mfu.plot(x, [100 * v for v in y], color="#f4a261", linewidth=1.0)
        ax_mfu.set_ylabel("MFU %", color="#f4a261")
        drawn.append(f"mfu {len(x)}")

    x, y = series(steps, "lr")
    ax_lr.plot(x, y, color="#6d597a", linewidth=1.2)
    drawn.append(f"lr {len(x)}")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(alpha=0.3)
    x, y = series(steps, "grad_norm")
    if x:
        ax_norm = ax_lr.twinx()
        ax_norm.plot(x, y, color="#b5838d", linewidth=0.8, alpha=0.8)
        ax_norm.set_ylabel("grad norm", color="#b5838d")
        drawn.append(f"grad_norm {len(x)}")

    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        fail(f"{out}: cannot write: {e.strerror}")
    print(f"wrote {out}: {len(steps)} steps; " + ", ".join(drawn) + mark)


if __name__ == "__main__":
    main()
