#!/usr/bin/env python3
"""The peer for bench_tokenizer: Hugging Face tokenizers encoding tiny-shakespeare line by line on one
thread (TOKENIZERS_PARALLELISM=false, encode() per line, as bench_tokenizer does)."""
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402

fixtures = os.environ.get("RP_FIXTURES_DIR", "../shared/fixtures")
with open(os.path.join(fixtures, "text", "tinyshakespeare.txt"), encoding="utf-8") as f:
    lines = [line for line in f]
size = sum(len(line.encode("utf-8")) for line in lines)
for name, path in (("qwen3", "tokenizers/qwen3/tokenizer.json"), ("tinystories", "models/tinystories-656k/tokenizer.json")):
    tok = Tokenizer.from_file(os.path.join(fixtures, path))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for line in lines:
            tok.encode(line, add_special_tokens=False)
        best = min(best, time.perf_counter() - start)
    print(f"{name:12s} {size / best / 1e6:7.2f} MB/s  (HF tokenizers, encode per line, 1 thread)", file=sys.stdout)
