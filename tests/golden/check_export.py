"""Loads roundpipe_export's output with transformers (and PEFT) and compares the logits with roundpipe's own.

Usage: check_export.py --ours ours.safetensors --model <exported dir> [--adapter <peft dir> --base <base dir>]
`ours.safetensors` holds input_ids [1, T] and the logits [1, T, V] roundpipe computed with the trained weights.
Exit code 0 when every comparison is within --tol (max |diff| / max |logit|).
"""
import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ours", required=True)
    p.add_argument("--model")
    p.add_argument("--adapter")
    p.add_argument("--base")
    p.add_argument("--tol", type=float, default=1e-5)
    args = p.parse_args()
    ours = load_file(args.ours)
    ids, ref = ours["input_ids"], ours["logits"]

    def compare(model, what):
        model.eval()
        with torch.no_grad():
            got = model(input_ids=ids).logits.float()
        rel = ((got - ref).abs().max() / ref.abs().max()).item()
        print(f"{what}: max |diff| / max |logit| = {rel:.3g} (tol {args.tol:g})")
        return rel <= args.tol

    ok = True
    if args.model:
        ok &= compare(AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32), "exported model")
    if args.adapter:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
        ok &= compare(PeftModel.from_pretrained(base, args.adapter), "PEFT adapter on its base")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
