#!/usr/bin/env python3
"""The peer for bench_model_layers: transformers' LlamaDecoderLayer and LM head + loss on the same shapes,
one thread, float32, eager and sdpa attention. Prints ms per call and tokens/s."""
import time

import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

SHAPES = {0: dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=4, intermediate_size=384, vocab_size=2048),
          1: dict(hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, intermediate_size=3072,
                  vocab_size=32000)}
SEQ = 256


def timeit(fn, min_time=0.5):
    fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time or n < 3:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def main():
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, 1 thread, seq {SEQ}")
    print(f"{'case':40s} {'ms':>9s} {'tok/s':>10s}")
    for cfg, shape in SHAPES.items():
        for attn in ("eager", "sdpa"):
            config = transformers.LlamaConfig(num_hidden_layers=1, attn_implementation=attn, **shape)
            layer = LlamaDecoderLayer(config, 0)
            rotary = LlamaRotaryEmbedding(config)
            x = torch.randn(1, SEQ, config.hidden_size)
            pos = torch.arange(SEQ).unsqueeze(0)
            emb = rotary(x, pos)
            mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)[None, None]
            for bwd in (0, 1):
                xi = x.clone().requires_grad_(bool(bwd))

                def step():
                    out = layer(xi, attention_mask=mask, position_embeddings=emb, position_ids=pos)
                    out = out[0] if isinstance(out, tuple) else out
                    if bwd:
                        out.sum().backward()

                t = timeit(step)
                print(f"{f'DecoderLayer cfg:{cfg} bwd:{bwd} {attn}':40s} {t * 1e3:9.2f} {SEQ / t:10.0f}")
        head = torch.nn.Linear(shape["hidden_size"], shape["vocab_size"], bias=False)
        norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(shape["hidden_size"])
        h = torch.randn(1, SEQ, shape["hidden_size"], requires_grad=True)
        targets = torch.randint(shape["vocab_size"], (SEQ,))

        def head_step():
            logits = head(norm(h)).float()
            torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets, reduction="sum").backward()

        t = timeit(head_step)
        print(f"{f'HeadLoss cfg:{cfg}':40s} {t * 1e3:9.2f} {SEQ / t:10.0f}")


if __name__ == "__main__":
    main()
