"""G2's peer: the RoundPipe reference library (`roundpipe` 0.1.1 from PyPI, the paper's implementation) training
a randomly initialised Hugging Face model of a config.json shape, as its own benchmark/train.py does: bf16
weights, fp32 optimizer states (its CPU Adam), random token ids, M microbatches per step, async step. Prints one
JSON line: tokens/s over the timed steps and the peak GPU memory. Run by benchmarks/gpu_bench.py beside
roundpipe_train at the same shape, batch, sequence length and microbatch count.

--memory-gib G makes each GPU a card of G GiB for the peer: its allocator's memory fraction, and the free memory
its partitioner reads at import (torch.cuda.mem_get_info; its default stage budget is 0.6 of it).

Usage: python peer_roundpipe_ref.py --config benchmarks/configs/qwen3-1.7b-shape --batch 8 --seq 2048 \
           --microbatches 8 [--lora-rank 16] [--warmup 3 --steps 5] [--memory-gib 24] [--recompute-grain layer]
"""
import argparse
import json
import time

import torch


def emulate_card(card_bytes):
    """Every GPU as a card of card_bytes: the allocator may not reserve more, and mem_get_info reports that card."""
    for d in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(d).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, card_bytes / total), d)
    device_free_and_total = torch.cuda.mem_get_info

    def card_free_and_total(device=None):
        free, total = device_free_and_total(device)
        return min(free, max(0, int(card_bytes) - torch.cuda.memory_reserved(device))), min(total, int(card_bytes))

    torch.cuda.mem_get_info = card_free_and_total


def adapt_to_transformers(module, model):
    """roundpipe 0.1.1 was written against transformers 4.x; the GPU machine has 5.x. Two differences reach its
    Qwen3 wrapper (`module`, one of roundpipe.models.*): the mask builders take `inputs_embeds` (was
    `input_embeds`) and no `cache_position`, so keywords are renamed and dropped to fit what is installed; and
    decoder layers no longer carry `attention_type`, so each of `model`'s layers gets its config.layer_types."""
    import inspect

    layer_types = getattr(model.config, "layer_types", None)
    for index, layer in enumerate(model.model.layers):
        if not hasattr(layer, "attention_type"):
            layer.attention_type = layer_types[index] if layer_types else "full_attention"

    for name in ("create_causal_mask", "create_sliding_window_causal_mask"):
        build = getattr(module, name, None)
        if build is None:
            continue
        accepted = inspect.signature(build).parameters
        if "input_embeds" in accepted:
            continue

        def adapted(*args, _build=build, _accepted=accepted, **kwargs):
            if "input_embeds" in kwargs:
                kwargs["inputs_embeds"] = kwargs.pop("input_embeds")
            return _build(*args, **{k: v for k, v in kwargs.items() if k in _accepted})

        setattr(module, name, adapted)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="directory with a Hugging Face config.json")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--memory-gib", type=float, default=0.0, help="emulate a card of this many GiB (0 = the GPU's)")
    ap.add_argument("--recompute-grain", choices=["stage", "layer"], default="stage")
    a = ap.parse_args()
    if a.memory_gib > 0:
        emulate_card(a.memory_gib * 2**30)

    import roundpipe
    import roundpipe.models.qwen3
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(a.config)
    config.use_cache = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    if a.lora_rank > 0:
        import peft

        model = peft.get_peft_model(
            model, peft.LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, target_modules="all-linear")
        ).base_model.model
    adapt_to_transformers(roundpipe.models.qwen3, model)
    model = roundpipe.wrap_model_to_roundpipe(
        model,
        model_run_config=roundpipe.RoundPipeRunConfig(num_microbatch=a.microbatches, recompute_grain=a.recompute_grain),
        optim_dtype=torch.float32,
    )
    optim = roundpipe.optim.Adam(model.optim_parameters(), lr=1e-5)
    ids = torch.randint(0, config.vocab_size, (a.batch, a.seq))

    def step():
        model.forward_backward(
            input_kwargs={"input_ids": ids, "labels": ids, "return_logits": False},
            loss_fn=lambda outputs, labels: outputs.loss / a.microbatches,
        )
        model.step(lambda: (optim.step(), optim.zero_grad()))

    for _ in range(a.warmup):
        step()
    model.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    model.synchronize()
    elapsed = time.perf_counter() - start
    peak = max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count()))
    print(json.dumps({"peer": f"roundpipe {roundpipe.__version__}", "tokens_per_s": a.steps * a.batch * a.seq / elapsed,
                      "peak_gpu_mb": peak / 1e6, "gpus": torch.cuda.device_count()}))


if __name__ == "__main__":
    main()
