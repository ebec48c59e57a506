"""DeepSpeed's CPU Adam (DeepSpeedCPUAdam, AVX kernels JIT-built by DeepSpeed) on the sizes bench_adamw uses:
ms per step and parameters/s, for 1 and 2 threads. Usage: .venv/bin/python benchmarks/peer_deepspeed_adam.py [Mparams]
"""
import statistics
import sys
import time

import torch


def main():
    n = int(float(sys.argv[1] if len(sys.argv) > 1 else 16) * 1e6)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    print(f"DeepSpeed CPU Adam (adamw_mode), {n / 1e6:.0f}M fp32 parameters")
    print("| implementation | threads | ms/step | Mparams/s | GB/s |\n|---|---:|---:|---:|---:|")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        p = torch.nn.Parameter(torch.full((n,), 0.5))
        p.grad = (torch.arange(n, dtype=torch.float32) % 1000) * 1e-3 - 0.5
        opt = DeepSpeedCPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)
        opt.step()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t)
        s = statistics.median(times)
        print(f"| DeepSpeed DeepSpeedCPUAdam | {threads} | {s * 1e3:.1f} | {n / s / 1e6:.0f} | {28 * n / s / 1e9:.1f} |")


if __name__ == "__main__":
    main()
