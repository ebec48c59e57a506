#!/usr/bin/env bash
# The Python wheels G2's peer needs (the RoundPipe reference library and transformers/PEFT for its model presets),
# downloaded on a connected machine for the GPU machine's Python version, into offline/wheels (carried to the
# GPU machine; its own torch is used). Usage: benchmarks/peer_wheels.sh <python version, e.g. 3.12> [dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:?usage: peer_wheels.sh <python version, e.g. 3.12> [dir]}"
dir="${2:-$root/offline/wheels}"
pip="${RP_PIP:-$root/.venv/bin/pip}"
# torch comes from the GPU machine; everything else the peer imports, without their dependency resolution
# (which would pull torch and the CUDA wheels; numpy comes with the machine's torch): the versions of
# scripts/requirements.txt where pinned there.
wheels=(roundpipe==0.1.1 beartype ninja py-cpuinfo tqdm typing-extensions
        transformers==5.23.0 tokenizers==0.23.3 safetensors==0.8.0 peft==0.21.2 huggingface-hub hf-xet
        accelerate psutil regex pyyaml requests urllib3 idna certifi charset-normalizer filelock fsspec packaging
        typer click shellingham rich markdown-it-py mdurl pygments httpx httpcore h11 anyio sniffio)
mkdir -p "$dir"
"$pip" download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform any -d "$dir" "${wheels[@]}"
echo "peer_wheels: $(ls "$dir" | wc -l) wheels, $(du -sm "$dir" | cut -f1) MiB in $dir"
