#!/usr/bin/env python3
"""The GPU benchmarks G1-G3 within a time budget (docs/benchmarks.md, docs/gpu.md), run by
`scripts/gpu-check.sh --part bench`. One shape for all: a randomly initialised model of a config.json shape
(benchmarks/configs/qwen3-1.7b: 28 layers, hidden 2048), full fine-tune, bf16, `--batch` rows of `--seq`
tokens in as many microbatches, one worker per GPU. In order, each run under its own time cap and what is left
of the budget (a run that does not fit is recorded as skipped, never guessed):
  G1  roundpipe_train with the weights in host RAM against the same run with the uploads skipped
      (RP_BENCH_NO_UPLOADS=1, as if resident on the GPU), same plan, optim.mode = sync;
  G2  the same shape in optim.mode = async (the reference steps its optimizer asynchronously: async vs async is
      the fair row), then the reference library (benchmarks/peer_roundpipe_ref.py, `roundpipe` 0.1.1), then the
      emulated device on the same host and shape (EMU, and EMU-compute: its per-layer times against the GPU's,
      both runs' profile.json, the calibration of docs/emulated.md); the headline row first, so that a slow
      start spends the emulated row, not the reference's;
  G3  model FLOP utilisation of each of our runs against the GPU's dense bf16 peak;
  the longest sequence on a card of --card-gib (ours: pipeline.memory_limit_gb; the peer: its allocator's
      fraction), layer recompute, one row per microbatch, 2 steps per rung: ours against the reference at the
      same lengths from --duel-start until a length one trains and the other does not (duel() below), under
      twice --ladder-cap; without the reference's G2 result (a dry run), our own longest, bisected.
Figures go into <out>/results.json (scripts/gpu_report.py) with the command that made them.
--dry-run: the CPU backend, configs/builtin-tiny, 64-token rows, 2 ranks under mpirun, the peer skipped (it
computes on CUDA only): every step of the plan within the same caps, on any machine (tests/gpu/check_dry_run.sh).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gpu_report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATED_PROFILE = "h100-measured"  # the emulated row's profile (cluster-configs/), calibrated by EMU-compute
PEAK_TFLOPS = [("H100 PCIe", 756), ("H100", 989), ("H200", 989), ("A100", 312), ("L40S", 362), ("4090", 165)]


class Budget:
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds

    def cap(self, wanted):
        return min(wanted, self.deadline - time.monotonic() - 5)


def run_logged(cmd, env, cap, log):
    """Runs cmd in its own process group, killed as a whole at `cap` seconds: (status, seconds)."""
    start = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=max(1, cap))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "timeout", time.monotonic() - start
    return ("ok" if rc == 0 else "failed"), time.monotonic() - start


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            return " / ".join(l.strip() for l in f.readlines()[-n:])[-300:]
    except OSError:
        return ""


def trace_summary(out, top=8):
    """Where a run's time went, from its trace.json (the work directory does not come back): per thread of the
    lowest rank, the spans' total seconds by name with numbers blanked (layers, microbatches, steps), largest
    first. "" when there is no trace."""
    try:
        events = json.load(open(os.path.join(out, "trace.json")))
    except (OSError, ValueError):
        return ""
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    if not spans:
        return ""
    rank = min(e.get("pid", 0) for e in spans)
    names = {e.get("tid"): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == rank}
    totals = {}
    for e in spans:
        if e.get("pid") != rank:
            continue
        key = (e.get("tid"), re.sub(r"\d+", "#", e["name"]))
        totals[key] = totals.get(key, 0.0) + e["dur"] / 1e6
    lines = []
    for tid in sorted({t for t, _ in totals}, key=str):
        rows = sorted(((v, n) for (t, n), v in totals.items() if t == tid), reverse=True)[:top]
        lines.append(f"  rank {rank} {names.get(tid, tid)}: " + "; ".join(f"{n} {v:.2f} s" for v, n in rows))
    return "\n".join(lines)


def layer_times(out):
    """A run's per-layer times: (forward_ms, backward_ms) per microbatch from its profile.json, which rank 0 writes at
    the end of a run from the compute marks (CUDA events on a GPU, the model's clock on the emulated device;
    docs/trace-formats.md), or None (a run stopped by its cap, or too short to measure)."""
    try:
        p = json.load(open(os.path.join(out, "profile.json")))
        return [float(x) for x in p["forward_ms"]], [float(x) for x in p["backward_ms"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def profile_setting(profile, key):
    """A number from cluster-configs/<profile>.toml (`key = value`, the first such line), or None."""
    try:
        text = open(os.path.join(ROOT, "cluster-configs", f"{profile}.toml")).read()
    except OSError:
        return None
    m = re.search(rf"^\s*{re.escape(key)}\s*=\s*([-+0-9.eE]+)", text, re.M)
    return float(m.group(1)) if m else None


def calibration(real, emulated, efficiency):
    """docs/emulated.md, "Calibration": the emulated device's compute against the GPU's, from the two runs' per-layer
    times (layer_times), summed over the layers, forward and backward apart. Not the bubble report's busy: on a GPU
    that is the host's issue spans. The emulated compute lasts FLOPs / (peak x assumptions.matmul_efficiency) plus
    its kernel floor, so with no floor the efficiency that makes the sums equal is the profile's times emulated /
    real. Returns (emulated / real, that efficiency or None, detail), or None where the times cannot be compared."""
    if not real or not emulated or len(real[0]) != len(emulated[0]):
        return None
    f_real, b_real = sum(real[0]), sum(real[1])
    f_emu, b_emu = sum(emulated[0]), sum(emulated[1])
    if f_real + b_real <= 0 or f_emu + b_emu <= 0:
        return None
    ratio = (f_emu + b_emu) / (f_real + b_real)
    suggested = efficiency * ratio if efficiency else None
    detail = (f"per microbatch over {len(real[0])} layers: forward {f_emu:.2f} vs {f_real:.2f} ms, backward "
              f"(recompute excluded) {b_emu:.2f} vs {b_real:.2f} ms (emulated vs GPU)")
    if f_real > 0 and b_real > 0:
        detail += f"; forward x{f_emu / f_real:.3f}, backward x{b_emu / b_real:.3f}"
    if suggested:
        detail += f"; assumptions.matmul_efficiency {efficiency:g} -> {suggested:.3f}"
    return ratio, suggested, detail


def flops_per_token(model_dir, seq):
    """Model FLOPs per trained token: forward + backward = 3 x forward, causal attention, recompute not counted."""
    c = json.load(open(os.path.join(model_dir, "config.json")))
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim") or h // heads
    matmul = layers * (h * heads * hd * 2 + h * kv * hd * 2 + 3 * h * c["intermediate_size"]) + vocab * h
    attention = layers * 2 * seq * heads * hd  # QK^T and AV, causal: half of 2 x 2 x T x heads x hd per token
    return 3 * (2 * matmul + attention)


def duel(fits, start, grain, seq_max):
    """Which of the two trains the longer sequence, ours or the reference, probing both at the same lengths.
    `fits(system, tokens)` runs one rung ("ours" or "peer") and says whether it trained within the card, or None
    when no time is left. The reference goes first at each length, doubling from `start` while it trains; ours
    runs where the answer depends on it: where the reference does not train (ours training there decides it),
    and below a length neither trains, where the lengths are bisected in multiples of `grain`. So a length one
    trains and the other does not decides in as few rungs as the two limits allow, instead of bisecting each
    limit apart. Returns (verdict, why): "ours" or "peer" (that one trains a length the other does not),
    "tie" (the same to `grain`, or both train `seq_max`), or None (stopped: no time left)."""
    lo, hi, s = 0, None, start  # the reference trains lo (0: none seen); neither trains hi
    ours_lo = False  # ours trains lo
    while True:
        peer = fits("peer", s)
        if peer is None:
            return None, f"stopped before the reference's rung at {s}"
        if not peer or hi is not None or s >= seq_max:
            ours = fits("ours", s)
            if ours is None:
                return None, f"stopped before our rung at {s}"
            if ours and not peer:
                return "ours", f"ours trains {s} tokens, the reference does not"
            if peer and not ours:
                return "peer", f"the reference trains {s} tokens, ours does not"
            if ours:  # both train s: only at seq_max (doubling) or bisecting upwards
                lo, ours_lo = s, True
                if s >= seq_max:
                    return "tie", f"both train {s} tokens, the longest tried"
            else:
                hi = s
        else:
            lo, ours_lo = s, False
        if hi is None:
            s = min(2 * s, seq_max)
            continue
        mid = (lo + hi) // 2 // grain * grain
        if mid > lo:
            s = mid
            continue
        if lo == 0:
            return None, f"neither trains {hi} tokens, the shortest tried"
        if not ours_lo:
            ours = fits("ours", lo)
            if ours is None:
                return None, f"stopped before our rung at {lo}"
            if not ours:
                return "peer", f"the reference trains {lo} tokens, ours does not"
        return "tie", f"both train {lo} tokens, neither {hi}"


VERDICTS = {"ours": "ours longer", "peer": "the reference longer", "tie": "the same", None: "undecided"}


class Bench:
    def __init__(self, a):
        self.a, self.out, self.budget = a, a.out, Budget(a.budget)
        self.work = tempfile.mkdtemp(prefix="rp-gpu-bench-")
        self.data = os.path.join(self.work, "data.txt")
        with open(self.data, "w") as f:
            f.write(("the quick brown fox jumps over the lazy dog. " * 40 + "\n") * 4000)
        self.train = os.path.join(a.build, "src", "cli", "roundpipe_train")
        self.log = open(os.path.join(self.out, "bench-log.txt"), "a")

    def note(self, text):
        print(f"gpu_bench: {text}", flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def keep_log(self, name, log, lines=80):
        """Each run's log (its last lines) into bench-log.txt: the machine and its /tmp go back after the call."""
        try:
            text = open(log, errors="replace").read().splitlines()[-lines:]
        except OSError:
            text = ["(no log)"]
        self.log.write(f"--- {name}\n" + "\n".join(text) + "\n")
        self.log.flush()

    def skip(self, name, reason):
        gpu_report.step(self.out, name, "skipped", 0, "", reason)
        self.note(f"{name}: skipped ({reason})")

    def room(self, name, wanted):
        """The seconds a run may take (its own cap or what is left of the budget), or None: recorded as skipped."""
        cap = self.budget.cap(wanted)
        if cap < self.a.min_run:
            self.skip(name, f"budget: {max(0, cap):.0f} s left")
            return None
        return cap

    def launch(self):
        cmd = ["mpirun", "-np", str(self.a.workers), "--bind-to", "none", "--oversubscribe"]
        return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])

    def ours(self, name, seq, batch, steps, warm, cap, sets=(), env_extra=None):
        """One roundpipe_train run: {"tokens_per_s", "peak_gpu_mb"} or None (recorded as a failed step)."""
        out = os.path.join(self.work, name)
        cmd = self.launch() + [
            self.train, "--config", "/dev/null", "--set", f"model.path={self.a.model}",
            "--set", f"model.tokenizer={ROOT}/configs/builtin-tiny", "--set", "model.init=random",
            "--set", "model.dtype=bfloat16", "--set", f"data.path={self.data}", "--set", f"train.seq_len={seq}",
            "--set", f"train.global_batch={batch}", "--set", f"train.microbatches={batch}",
            "--set", f"train.max_steps={steps}", "--set", f"pipeline.backend={self.a.backend}",
            "--set", "checkpoint.every=0", "--set", "checkpoint.at_end=false", "--set", f"output.dir={out}"]
        for s in sets:
            cmd += ["--set", s]
        env = dict(os.environ, **(env_extra or {}))
        env.setdefault("RP_NUM_THREADS", "1" if self.a.dry_run else "0")
        shown = " ".join(f"{k}={v}" for k, v in (env_extra or {}).items()) + " " + shlex.join(cmd)
        cap = self.room(name, cap)
        if cap is None:
            return None
        log = os.path.join(self.work, name + ".log")
        status, seconds = run_logged(cmd, env, cap, log)
        self.keep_log(name, log)
        result, detail = None, ""
        # A run stopped by its cap after its steps were measured still measured them (the steps' own records).
        rows = []
        if os.path.exists(os.path.join(out, "metrics.jsonl")):
            rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
        if status == "ok" or len(rows) > warm:
            counted = rows[warm:] or rows
            result = {"tokens_per_s": sum(r["tokens_per_s"] for r in counted) / len(counted), "peak_gpu_mb": None}
            try:
                ranks = json.load(open(os.path.join(out, "memory.json")))["ranks"]
                result["peak_gpu_mb"] = max(r["gpu_job_peak_mb"] + r["stage_slots_mb"] for r in ranks)
            except (OSError, KeyError, ValueError):
                pass
            detail = f"{result['tokens_per_s']:.1f} tokens/s over steps {warm + 1}-{len(rows)}"
            if status != "ok":
                detail += f" (then stopped by its {cap:.0f} s cap)"
        else:
            detail = f"after {seconds:.0f} s (cap {cap:.0f} s): {tail(log)}"
        gpu_report.step(self.out, name, status, seconds, shown.strip(), detail)
        self.note(f"{name}: {status} in {seconds:.0f} s {detail}")
        layers = layer_times(out)  # kept: the run's directory does not come back
        if result is not None:
            result["layers"] = layers
        if layers:
            self.note(f"{name}: profile.json forward_ms {[round(x, 3) for x in layers[0]]} "
                      f"backward_ms {[round(x, 3) for x in layers[1]]}")
        with open(log, errors="replace") as f:  # how long the set-up took (Note [Parallel first touch])
            setup = [line.split("] ", 1)[-1].strip() for line in f if "pipeline: set up in" in line]
        if setup:
            self.note(f"{name}: {setup[0]}")
        summary = trace_summary(out)
        if summary:
            self.note(f"{name}: time by span (trace.json, all steps)\n{summary}")
        return result

    def peer(self, name, seq, batch, warm, steps, cap, extra=()):
        if self.a.dry_run:
            self.skip(name, "dry run: the reference library computes on CUDA only")
            return None
        cmd = [self.a.python, os.path.join(ROOT, "benchmarks", "peer_roundpipe_ref.py"), "--config", self.a.model,
               "--batch", str(batch), "--seq", str(seq), "--microbatches", str(batch), "--warmup", str(warm),
               "--steps", str(steps), *extra]
        cap = self.room(name, cap)
        if cap is None:
            return None
        log = os.path.join(self.work, name + ".log")
        env = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("RP_PEER_LD_LIBRARY_PATH", ""))
        status, seconds = run_logged(cmd, env, cap, log)
        self.keep_log(name, log)
        result, detail = None, f"after {seconds:.0f} s (cap {cap:.0f} s): {tail(log)}"
        if status == "ok":
            lines = [l for l in open(log) if l.startswith("{")]
            if lines:
                result = json.loads(lines[-1])
                detail = f"{result['tokens_per_s']:.1f} tokens/s ({result['peer']})"
            else:
                status = "failed"
        gpu_report.step(self.out, name, status, seconds, shlex.join(cmd), detail)
        self.note(f"{name}: {status} in {seconds:.0f} s {detail}")
        return result

    def rung(self, system, tokens, card_gib, cap):
        """One rung of a ladder: True where a run of `tokens` per row trains within the card, False where it
        does not (or fails), None where no time is left for it (recorded as skipped)."""
        a = self.a
        name = f"ladder-{system}-{tokens}"
        left = self.budget.cap(cap)
        if left < a.min_run:
            self.skip(name, f"budget: {max(0, left):.0f} s left")
            return None
        rows = a.workers + 1
        if system == "ours":
            limit = round(card_gib * 2**30 / 1e9 - a.reserve_gb, 2)  # that card's free memory less our reserve
            r = self.ours(name, tokens, rows, 2, 1, left, sets=("pipeline.recompute=layer",
                                                                 f"pipeline.memory_limit_gb={limit}"))
        else:
            r = self.peer(name, tokens, rows, 1, 1, left, extra=("--memory-gib", str(card_gib),
                                                                 "--recompute-grain", "layer"))
        return r is not None and (r.get("peak_gpu_mb") is None or a.dry_run or
                                  r["peak_gpu_mb"] <= card_gib * 2**30 / 1e6)

    def ladder(self, system, card_gib):
        """Bisection over lengths in multiples of `grain`: the longest that ran within the card, and why not more."""
        a = self.a
        lo, hi, why = None, None, "not tried"
        grain = a.ladder_grain
        deadline = time.monotonic() + a.ladder_cap
        s = a.ladder_start
        while True:
            fits = self.rung(system, s, card_gib, deadline - time.monotonic())
            if fits is None:
                why = f"{why}; ladder stopped: its cap or the budget"
                break
            if fits:
                lo, why = s, f"{s} fits"
            else:
                hi, why = s, f"{s} does not fit (or failed)"
            if hi is None:
                nxt = min(s * 2, a.seq_max)
            elif lo is None:
                nxt = max(grain, (hi // 2) // grain * grain)
            else:
                nxt = (lo + hi) // 2 // grain * grain
            if nxt in (lo, hi) or nxt == s or (hi is None and s >= a.seq_max):
                break
            s = nxt
        return lo, hi, why

    def remember(self, name, result):
        """Measured runs outlive the call in --state (the bench part compares with what build+tests measured)."""
        state = json.load(open(self.a.state)) if os.path.exists(self.a.state) else {}
        state[name] = result
        with open(self.a.state, "w") as f:
            json.dump(state, f)

    def recall(self, name):
        state = json.load(open(self.a.state)) if os.path.exists(self.a.state) else {}
        return state.get(name)

    def run(self):
        a = self.a
        fpt = flops_per_token(a.model, a.seq)
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines() if not a.dry_run else []
        peak = a.peak_tflops or next((p for key, p in PEAK_TFLOPS if gpu and key in gpu[0]), 0)
        shape = f"{os.path.basename(a.model)}, {a.batch} x {a.seq} tokens in {a.batch} microbatches, bf16, " \
                f"{a.workers} worker(s)"
        self.note(f"figures {a.figures}; shape: {shape}; dense bf16 peak {peak or '?'} TFLOPS per GPU; "
                  f"budget {a.budget} s")
        commands = lambda: {s["name"]: s["command"] for s in gpu_report.load(self.out)["steps"]}

        def mfu(name, r):
            if r and peak:
                tflops = r["tokens_per_s"] * fpt / a.workers / 1e12
                gpu_report.figure(self.out, "G3", f"MFU of {name}", tflops / peak, "fraction of peak",
                                  commands()[name], f"{tflops:.1f} TFLOPS per GPU of {peak}; "
                                  f"{fpt / 1e9:.2f} GFLOP per token")

        if "g1" in a.figures:
            host = self.ours("G1-host-sync", a.seq, a.batch, a.steps, a.warmup, a.run_cap, sets=("optim.mode=sync",))
            resident = self.ours("G1-no-upload-sync", a.seq, a.batch, a.steps, a.warmup, a.run_cap,
                                 sets=("optim.mode=sync",), env_extra={"RP_BENCH_NO_UPLOADS": "1"})
            if host and resident:
                gpu_report.figure(self.out, "G1", "host-resident / no-upload tokens/s (sync)",
                                  host["tokens_per_s"] / resident["tokens_per_s"], "ratio",
                                  commands()["G1-host-sync"],
                                  f"{host['tokens_per_s']:.0f} vs {resident['tokens_per_s']:.0f} tokens/s; {shape}")
            mfu("G1-host-sync", host)
            mfu("G1-no-upload-sync", resident)
            self.remember("G1-host-sync", host)
        if "g2" in a.figures:
            host = self.recall("G1-host-sync")
            asynchronous = self.ours("G2-ours-async", a.seq, a.batch, a.steps, a.warmup, a.run_cap,
                                     sets=("optim.mode=async",))
            mfu("G2-ours-async", asynchronous)
            # The reference first: G2 is the headline, the emulated row below is not.
            reference = self.peer("G2-peer", a.seq, a.batch, a.warmup, a.steps - a.warmup, a.peer_cap)
            if reference:
                for name, r in (("G1-host-sync (the build+tests part)", host), ("G2-ours-async", asynchronous)):
                    if r:
                        gpu_report.figure(self.out, "G2", f"{name} / peer tokens/s",
                                          r["tokens_per_s"] / reference["tokens_per_s"], "ratio",
                                          commands().get(name, "see the build+tests part"),
                                          f"{r['tokens_per_s']:.0f} vs {reference['tokens_per_s']:.0f} tokens/s "
                                          f"({reference['peer']}, peak {reference['peak_gpu_mb']:.0f} MB); {shape}")
            # The emulated device (docs/emulated.md) on the same host, shape and plan, its profile the one measured
            # on an H100 (cluster-configs/h100-measured.toml): its tokens/s over the real async run's is the
            # emulator's error (EMU); its per-layer times over the GPU's, both from profile.json, calibrate the
            # profile's compute (EMU-compute; docs/emulated.md, "Calibration").
            emulated = self.ours("G2-emulated-async", a.seq, a.batch, a.steps, a.warmup, a.run_cap,
                                 sets=("optim.mode=async", "pipeline.backend=emulated",
                                       f"pipeline.emulated_profile={EMULATED_PROFILE}"))
            if asynchronous and emulated:
                gpu_report.figure(self.out, "EMU", f"emulated ({EMULATED_PROFILE}) / real tokens/s (async)",
                                  emulated["tokens_per_s"] / asynchronous["tokens_per_s"], "ratio",
                                  commands()["G2-emulated-async"],
                                  f"{emulated['tokens_per_s']:.0f} vs {asynchronous['tokens_per_s']:.0f} tokens/s; "
                                  f"{shape}")
                c = calibration(asynchronous.get("layers"), emulated.get("layers"),
                                profile_setting(EMULATED_PROFILE, "matmul_efficiency"))
                gpu_report.figure(self.out, "EMU-compute",
                                  f"emulated ({EMULATED_PROFILE}) / GPU per-layer compute (profile.json)",
                                  c[0] if c else "-", "ratio", commands()["G2-emulated-async"],
                                  c[2] if c else "no comparable profile.json from both runs (stopped by a cap, or "
                                  "too few steps measured)")
            if reference:  # ours against the reference at the same lengths (duel above)
                deadline = time.monotonic() + 2 * a.ladder_cap
                verdict, why = duel(lambda system, tokens: self.rung(system, tokens, a.card_gib,
                                                                     deadline - time.monotonic()),
                                    a.duel_start, a.ladder_grain, a.seq_max)
                gpu_report.figure(self.out, "G2-max-seq", f"longest sequence within {a.card_gib} GiB: "
                                  "ours vs the reference", VERDICTS[verdict], "verdict", "see the ladder-* steps", why)
            else:  # no reference to duel: our own longest, bisected
                self.skip("ladder-peer", "dry run: the reference library computes on CUDA only" if a.dry_run
                          else "the reference's G2 run gave no result")
                lo, hi, why = self.ladder("ours", a.card_gib)
                gpu_report.figure(self.out, "G2-max-seq", f"ours: longest sequence within {a.card_gib} GiB",
                                  lo if lo is not None else "-", "tokens", "see the ladder-* steps",
                                  f"fits: {lo}; first not fitting: {hi}; {why}")


def gpu_count():
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True, help="where results.json is (scripts/gpu_report.py init made it; "
                    "started here when absent, for a call of this script alone)")
    ap.add_argument("--budget", type=float, required=True, help="seconds for everything")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--figures", default="g1,g2", help="g1: G1 and its G3; g2: G2 (async, the peer), its G3, "
                    "the ladder")
    ap.add_argument("--state", default=None, help="measured runs kept between the parts [<out>/../bench-state.json]")
    ap.add_argument("--python", default=sys.executable, help="the python that runs the peer")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--peak-tflops", type=float, default=0)
    ap.add_argument("--run-cap", type=float, default=None, help="seconds per run of ours")
    ap.add_argument("--peer-cap", type=float, default=240)
    ap.add_argument("--min-run", type=float, default=None, help="a run with less time left is skipped")
    ap.add_argument("--card-gib", type=float, default=24, help="the card of the longest-sequence ladder (RTX 4090)")
    ap.add_argument("--reserve-gb", type=float, default=2.0, help="our pipeline.memory_reserve_gb default")
    ap.add_argument("--ladder-cap", type=float, default=None, help="seconds per system's ladder")
    ap.add_argument("--ladder-start", type=int, default=None)
    ap.add_argument("--duel-start", type=int, default=None, help="the duel's first length [81920: above the 73k "
                    "tokens the RoundPipe paper trains Qwen3-1.7B at on one RTX 4090 with the reference library]")
    ap.add_argument("--ladder-grain", type=int, default=None)
    ap.add_argument("--seq-max", type=int, default=None)
    a = ap.parse_args()
    dry = a.dry_run
    defaults = dict(model=f"{ROOT}/configs/builtin-tiny" if dry else f"{ROOT}/benchmarks/configs/qwen3-1.7b",
                    seq=64 if dry else 4096, batch=4 if dry else 8, steps=4 if dry else 5,
                    workers=2 if dry else max(1, gpu_count()),
                    run_cap=60 if dry else 180, min_run=5 if dry else 30, ladder_cap=60 if dry else 120,
                    ladder_start=128 if dry else 16384, duel_start=128 if dry else 81920,
                    ladder_grain=64 if dry else 2048,
                    seq_max=256 if dry else 131072)
    for key, value in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.backend = "cpu" if dry else "cuda"
    a.state = a.state or os.path.join(a.build, "gpu-bench-state.json")
    if not os.path.exists(os.path.join(a.out, "results.json")):  # called alone, not by scripts/gpu-check.sh
        os.makedirs(a.out, exist_ok=True)
        gpu_report.init(a.out, "bench (gpu_bench.py alone)", dry, "see bench-log.txt", "working tree", "-", a.budget)
    bench = Bench(a)
    try:
        bench.run()
    finally:
        shutil.rmtree(bench.work, ignore_errors=True)  # the runs' outputs; their logs are in bench-log.txt


if __name__ == "__main__":
    main()
