"""The peer for the end-to-end CPU benchmark: torch.distributed.pipelining (ScheduleGPipe, Schedule1F1B) on gloo,
the same model as benchmarks/pipeline_schedules.sh (benchmarks/configs/qwen3-1.7b-shape, random init, fp32),
the same batch (2·M rows of 128 tokens in M = W + 1 microbatches), one compute thread per rank, AdamW on every
stage's parameters. Prints tokens/s (mean over steps 3..N) for each schedule.
Usage: .venv/bin/python benchmarks/peer_torch_pipelining.py [workers] [steps]   (spawns the ranks itself)
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 128


class Stage(nn.Module):
    """Decoder layers [lo, hi) of a Qwen3 model, with the embedding on the first stage and the final norm and
    LM head on the last (an untied copy: stages cannot share a parameter); rotary embeddings computed locally."""

    def __init__(self, model, lo, hi, first, last):
        super().__init__()
        self.embed = model.model.embed_tokens if first else None
        self.layers = nn.ModuleList(model.model.layers[lo:hi])
        self.rotary = model.model.rotary_emb
        self.norm = model.model.norm if last else None
        self.head = nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False) if last else None
        if last:
            self.head.weight = nn.Parameter(model.lm_head.weight.detach().clone())

    def forward(self, x):
        h = self.embed(x) if self.embed is not None else x
        pos = torch.arange(h.shape[1]).unsqueeze(0).expand(h.shape[0], -1)
        pe = self.rotary(h, pos)
        for layer in self.layers:
            out = layer(h, position_embeddings=pe, attention_mask=None, position_ids=pos)
            h = out[0] if isinstance(out, tuple) else out
        if self.head is not None:
            h = self.head(self.norm(h))
        return h


def run(rank, world, steps, results):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(os.path.join(ROOT, "benchmarks/configs/qwen3-1.7b-shape"))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    n = config.num_hidden_layers
    bounds = [round(i * n / world) for i in range(world + 1)]
    m = world + 1
    rows = 2 * m
    vocab = config.vocab_size
    for name, cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        stage_mod = Stage(model, bounds[rank], bounds[rank + 1], rank == 0, rank == world - 1)
        stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
        loss_fn = lambda logits, target: F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))
        schedule = cls(stage, n_microbatches=m, loss_fn=loss_fn)
        opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-4)
        gen = torch.Generator().manual_seed(1)
        times = []
        for _ in range(steps):
            ids = torch.randint(0, vocab, (rows, SEQ + 1), generator=gen)
            dist.barrier()
            t = time.perf_counter()
            opt.zero_grad()
            if world == 1:
                schedule.step(ids[:, :-1], target=ids[:, 1:])
            elif rank == 0:
                schedule.step(ids[:, :-1])
            elif rank == world - 1:
                schedule.step(target=ids[:, 1:])
            else:
                schedule.step()
            opt.step()
            dist.barrier()
            times.append(time.perf_counter() - t)
        if rank == 0:
            tail = times[2:] or times
            results[name] = rows * SEQ / (sum(tail) / len(tail))
    dist.destroy_process_group()


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(run, args=(world, steps, results), nprocs=world, join=True)
        print(f"torch.distributed.pipelining on gloo, {world} ranks, 1 thread each, seq {SEQ}, {world + 1} microbatches")
        for name in ("gpipe", "1f1b"):
            print(f"| torch.distributed.pipelining {name} | {world} | {results[name]:.0f} tok/s |")


if __name__ == "__main__":
    main()
