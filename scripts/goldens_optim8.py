"""bitsandbytes' 8-bit blockwise AdamW as the reference of our 8-bit states (make_goldens.py; Note [8-bit states]
in src/optim/blockwise8.cpp, docs/optimizer.md "8-bit states").

optim/q8.safetensors:
  map.signed, map.unsigned        bitsandbytes.functional.create_dynamic_map(signed=...)
  <case>.x                        float32 inputs: normal, log-uniform magnitudes over 25 e-folds, a block of
                                  zeros, values on the maps' midpoints, and a short last block
  <case>.<map>.codes / .absmax    bitsandbytes' quantize_blockwise (blocksize 256), its generic kernel
                                  (backends/default: what its CUDA kernels compute)
  <case>.<map>.native             the codes of its native CPU kernel (0.50.2), which the test counts apart
optim/adamw8.safetensors (+ .json, the hyper-parameters): 20 steps of bitsandbytes' CPU
optimizer_update_8bit_blockwise ("adam", AdamW8bit's update) on two tensors (65,536 and 5,000 elements: a short
last block), the quantizer its generic kernel: init.<i>, grads.<i> [steps, n], and after each step
weights.<i> [steps, n], m.<i> / v.<i> (codes) [steps, n], absmax_m.<i> / absmax_v.<i> [steps, blocks].
"""
import json
import os

import torch


def _generic_quantize(A, code, blocksize):
    """bitsandbytes' quantize_blockwise through its generic (CompositeExplicitAutograd) kernel, not the CPU one."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    return torch.ops.bitsandbytes.quantize_blockwise.default.redispatch(keys, A, code, blocksize)


def optim8_goldens(target):
    import bitsandbytes  # noqa: F401  (registers torch.ops.bitsandbytes)
    import bitsandbytes.functional as F
    from bitsandbytes.backends.cpu import ops as cpu_ops
    from safetensors.torch import save_file

    maps = {"signed": F.create_dynamic_map(signed=True), "unsigned": F.create_dynamic_map(signed=False)}
    g = torch.Generator().manual_seed(11)
    n = 256 * 64
    cases = {
        "normal": torch.randn(n, generator=g),
        "loguniform": torch.sign(torch.randn(n, generator=g)) * torch.exp(-25 * torch.rand(n, generator=g)),
        "zeros": torch.cat([torch.zeros(256), torch.randn(256, generator=g)]),
        # Every midpoint of both maps, in a block whose absmax is 1: the ties (the lower code wins).
        "midpoints": torch.cat([torch.ones(1), (maps["signed"][:-1] + maps["signed"][1:]) / 2,
                                (maps["unsigned"][:-1] + maps["unsigned"][1:]) / 2, -torch.ones(1)]),
        "short": torch.randn(256 * 3 + 77, generator=g),
    }
    tensors = {f"map.{k}": v for k, v in maps.items()}
    for name, x in cases.items():
        tensors[f"{name}.x"] = x
        for kind, code in maps.items():
            values = x.abs() if kind == "unsigned" else x
            if kind == "unsigned":
                tensors[f"{name}.x_unsigned"] = values
            q, absmax = _generic_quantize(values, code, 256)
            tensors[f"{name}.{kind}.codes"] = q
            tensors[f"{name}.{kind}.absmax"] = absmax
            tensors[f"{name}.{kind}.native"] = torch.ops.bitsandbytes.quantize_blockwise(values, code, 256)[0]
    save_file(tensors, os.path.join(target, "q8.safetensors"))

    # The update itself: bitsandbytes' CPU function with its quantizer the generic kernel.
    def requantize(A_fp32, code, absmax_out, out_uint8, blocksize):
        out, absmax = _generic_quantize(A_fp32, code, blocksize)
        out_uint8.copy_(out)
        absmax_out.copy_(absmax)

    hyper = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, steps=20)
    saved = cpu_ops._quant_blockwise_fp32_direct
    cpu_ops._quant_blockwise_fp32_direct = requantize
    try:
        out = {}
        for i, size in enumerate((65536, 5000)):
            p = torch.randn(size, generator=g) * 0.02
            out[f"init.{i}"] = p.clone()
            blocks = -(size // -256)
            s1, s2 = torch.zeros(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
            a1, a2 = torch.zeros(blocks), torch.zeros(blocks)
            rows = {k: [] for k in ("grads", "weights", "m", "v", "absmax_m", "absmax_v")}
            for step in range(1, hyper["steps"] + 1):
                grad = torch.randn(size, generator=g) * (1e-3 if step % 4 else 1e-1)
                cpu_ops._optimizer_update_8bit_blockwise_cpu(
                    "adam", grad, p, s1, s2, hyper["betas"][0], hyper["betas"][1], 0.0, 0.0, hyper["eps"], step,
                    hyper["lr"], maps["signed"], maps["unsigned"], a1, a2, hyper["weight_decay"], 1.0)
                for k, v in (("grads", grad), ("weights", p), ("m", s1), ("v", s2), ("absmax_m", a1),
                             ("absmax_v", a2)):
                    rows[k].append(v.clone())
            for k, v in rows.items():
                out[f"{k}.{i}"] = torch.stack(v)
    finally:
        cpu_ops._quant_blockwise_fp32_direct = saved
    save_file(out, os.path.join(target, "adamw8.safetensors"))
    with open(os.path.join(target, "adamw8.json"), "w") as f:
        json.dump({k: list(v) if isinstance(v, tuple) else v for k, v in hyper.items()}, f)
