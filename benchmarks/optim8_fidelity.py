#!/usr/bin/env python3
"""The fidelity of 8-bit AdamW states (docs/optimizer.md, "8-bit states: fidelity"): fine-tunes with float32
moments and with 8-bit ones (optim.state_bits), side by side, over seeds and learning rates, past an epoch.

Each run is roundpipe_train's single-process trainer in bfloat16 (float32 masters; a split master trains bit for
bit as they do, tests/unit/test_split_master.cpp, so its column would be the float32 one) on a slice of
tiny-shakespeare the model never saw, held out: the text that follows it, the same for every run. The seed
orders the batches. Per cell (model, learning rate): the final training loss (mean of the last 10 steps) and
the held-out loss at the end, for each seed. The verdict per cell: 8-bit's mean final training loss within 1%
(relative) of float32's, and its mean held-out loss within the float32 seeds' spread (min..max). Each seed runs
in both widths on the same batches, so the paired difference (8-bit - float32, averaged over seeds) is printed
beside it; and how many 8-bit seeds fall outside the float32 spread one by one (a seed of float32's extremes
has its 8-bit twin next to it, outside about half the time, however small the difference).

Models: the fixtures' TinyStories-656K (pretrained; text it was not trained on) and, with --golden, the
generated Qwen3-shaped model of the goldens (qwen3-tiny: random init, so a training run rather than a fine-tune).
Usage: .venv/bin/python benchmarks/optim8_fidelity.py [--build build] [--fixtures ../shared/fixtures]
       [--golden build/goldens] [--steps 120] [--seeds 3] [--lrs 1e-6,1e-5,1e-4,1e-3] [--out /tmp/optim8-fidelity]
       [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(a, model, tokenizer, data, held_out, lr, seed, bits, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(a.build, "src", "cli", "roundpipe_train"), "--config", "/dev/null",
           "--set", f"model.path={model}", "--set", f"model.tokenizer={tokenizer}", "--set", "model.dtype=bfloat16",
           "--set", f"data.path={data}", "--set", f"data.eval_path={held_out}", "--set", "eval.every=0",
           "--set", "eval.max_rows=1024",
           "--set", "train.seq_len=64", "--set", "train.global_batch=8", "--set", "train.microbatches=1",
           "--set", f"train.max_steps={a.steps}", "--set", "train.epochs=0", "--set", f"train.seed={seed}",
           "--set", "train.threads=1", "--set", f"optim.lr={lr}", "--set", "optim.schedule=cosine",
           "--set", "optim.warmup_steps=10", "--set", f"optim.state_bits={bits}", "--set", "checkpoint.every=0",
           "--set", f"output.dir={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, RP_NUM_THREADS="1"))
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nfailed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    train = [x["loss"] for x in rows if "loss" in x and x.get("kind", "train") == "train"]
    evals = [x["eval_loss"] for x in rows if "eval_loss" in x]
    if not train or not evals:
        sys.exit(f"{out}/metrics.jsonl: no training or held-out loss ({rows[-1] if rows else 'empty'})")
    shutil.rmtree(out)
    return statistics.fmean(train[-10:]), evals[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--fixtures", default=os.environ.get("RP_FIXTURES_DIR", os.path.join(ROOT, "..", "shared",
                                                                                          "fixtures")))
    ap.add_argument("--golden", default="")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lrs", default="1e-6,1e-5,1e-4,1e-3")
    ap.add_argument("--bytes", type=int, default=60000, help="of tiny-shakespeare to train on (an epoch: ~40 steps)")
    ap.add_argument("--out", default="/tmp/optim8-fidelity")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="runs at a time (one thread each)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    data, held_out = os.path.join(a.out, "shakespeare-train.txt"), os.path.join(a.out, "shakespeare-held-out.txt")
    with open(os.path.join(a.fixtures, "text", "tinyshakespeare.txt"), "rb") as f:
        text = f.read(a.bytes + a.bytes // 3)
    cut = text.rfind(b"\n\n", 0, a.bytes) + 1  # training on the first a.bytes, held out: the next third as much
    with open(data, "wb") as f:
        f.write(text[:cut])
    with open(held_out, "wb") as f:
        f.write(text[cut:text.rfind(b"\n\n") + 1])
    tinystories = os.path.join(a.fixtures, "models", "tinystories-656k")
    models = [("TinyStories-656K (pretrained)", tinystories, tinystories)]
    if a.golden:
        models.append(("Qwen3-shaped (random init)", os.path.join(a.golden, "qwen3-tiny"),
                       os.path.join(ROOT, "configs", "builtin-tiny")))
    lrs = [float(x) for x in a.lrs.split(",")]
    print(f"optim8_fidelity: {a.steps} steps of 8 x 64 tokens on {cut} bytes of tiny-shakespeare (held out: the "
          f"next {len(text) - cut}, the same for every run), "
          f"{a.seeds} seeds, bfloat16, cosine schedule with 10 warmup steps")
    print("| model | lr | float32: final train loss (seeds) | 8-bit | rel. diff of means | float32: held-out "
          "(seeds) | 8-bit | paired diff | verdict |\n|---|---:|---|---|---:|---|---|---:|---|")
    failures = outside_seeds = 0
    pool = concurrent.futures.ThreadPoolExecutor(a.jobs)
    for m, (name, model, tokenizer) in enumerate(models):
        for lr in lrs:
            futures = {(bits, seed): pool.submit(run, a, model, tokenizer, data, held_out, lr, seed, bits,
                                                 os.path.join(a.out, f"run-{m}-{lr:g}-{bits}-{seed}"))
                       for bits in (32, 8) for seed in range(1, a.seeds + 1)}
            res = {bits: [futures[(bits, seed)].result() for seed in range(1, a.seeds + 1)] for bits in (32, 8)}
            t32, t8 = [r[0] for r in res[32]], [r[0] for r in res[8]]
            e32, e8 = [r[1] for r in res[32]], [r[1] for r in res[8]]
            rel = (statistics.fmean(t8) - statistics.fmean(t32)) / statistics.fmean(t32)
            ok = abs(rel) <= 0.01 and min(e32) <= statistics.fmean(e8) <= max(e32)
            paired = statistics.fmean(x - y for x, y in zip(e8, e32))
            outside_seeds += sum(not (min(e32) <= e <= max(e32)) for e in e8)
            failures += not ok
            fmt = lambda v: ", ".join(f"{x:.5f}" for x in v)  # noqa: E731
            print(f"| {name} | {lr:g} | {fmt(t32)} | {fmt(t8)} | {100 * rel:+.2f}% | {fmt(e32)} | {fmt(e8)} | "
                  f"{paired:+.5f} | {'within' if ok else 'OUTSIDE'} |", flush=True)
    print(f"optim8_fidelity: {failures} cell(s) outside the criteria; {outside_seeds} 8-bit seed(s) outside the "
          f"float32 spread one by one")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"optim8_fidelity: {time.time() - t0:.0f} s")
