"""Loads roundpipe_export's output with transformers (and PEFT) and compares the logits with roundpipe's own.

Usage: check_export.py --ours ours.safetensors --model <exported dir> [--adapter <peft dir> --base <base dir>]
                       [--low-precision <exported dir> --expect-dtype bfloat16]
`ours.safetensors` holds input_ids [1, T] and the logits [1, T, V] roundpipe computed with the trained weights.
--low-precision is loaded as a user would (no dtype argument: transformers takes the config's) and must come
up in --expect-dtype, with logits within --low-tol (a negative --low-tol checks the dtype alone).
Exit code 0 when every comparison is within --tol (max |diff| / max |logit|).
"""
import argparse
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import bnb_reference  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ours", required=True)
    p.add_argument("--model")
    p.add_argument("--adapter")
    p.add_argument("--base")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--low-precision")
    p.add_argument("--expect-dtype")
    p.add_argument("--low-tol", type=float, default=5e-2)
    args = p.parse_args()
    ours = load_file(args.ours)
    ids, ref = ours["input_ids"], ours["logits"]

    def compare(model, what, tol):
        model.eval()
        bnb_reference.without_packed_inference(model)
        with torch.no_grad():
            got = model(input_ids=ids).logits.float()
        rel = ((got - ref).abs().max() / ref.abs().max()).item()
        print(f"{what}: max |diff| / max |logit| = {rel:.3g} (tol {tol:g})")
        return rel <= tol

    ok = True
    if args.model:
        ok &= compare(AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32), "exported model", args.tol)
    if args.adapter:
        from peft import PeftModel

        bnb_reference.use_generic_cpu_kernels()  # a QLoRA base is loaded 4-bit by bitsandbytes

        base = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
        ok &= compare(PeftModel.from_pretrained(base, args.adapter), "PEFT adapter on its base", args.tol)
    if args.low_precision:
        model = AutoModelForCausalLM.from_pretrained(args.low_precision)
        # Modules a model keeps in float32 whatever the dtype (GPT-OSS's norms) are not the export's business.
        keep = getattr(model, "_keep_in_fp32_modules", None) or []
        dtypes = {p.dtype for n, p in model.named_parameters() if not any(k in n for k in keep)}
        print(f"{args.low_precision} loads as {sorted(str(d) for d in dtypes)} (expected {args.expect_dtype})")
        ok &= dtypes == {getattr(torch, args.expect_dtype)}
        if args.low_tol >= 0:
            ok &= compare(model, f"exported {args.expect_dtype} model", args.low_tol)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
