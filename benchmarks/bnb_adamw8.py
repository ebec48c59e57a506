#!/usr/bin/env python3
"""bitsandbytes' 8-bit AdamW step on the CPU (its optimizer_update_8bit_blockwise, 0.50.2) on N million float32
parameters at 1 and 2 threads, in bench_adamw's table format (docs/benchmarks.md, "8-bit states").
Usage: .venv/bin/python benchmarks/bnb_adamw8.py [millions, default 16]"""
import sys
import time

import torch

import bitsandbytes as bnb

n = int(float(sys.argv[1] if len(sys.argv) > 1 else 16) * 1e6)
print("| implementation | threads | ms/step | Mparams/s |\n|---|---:|---:|---:|")
for threads in (1, 2):
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.full((n,), 0.5))
    p.grad = (torch.arange(n) % 1000).float() * 1e-3 - 0.5
    opt = bnb.optim.AdamW8bit([p], lr=1e-3, weight_decay=0.01)
    opt.step()  # the states' allocation
    times = []
    for _ in range(3):
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
    s = min(times)
    print(f"| bitsandbytes {bnb.__version__} AdamW8bit (CPU) | {threads} | {s * 1e3:.1f} | {n / s / 1e6:.0f} |")
