"""G2's peer on the transformers installed here, without a GPU: roundpipe 0.1.1's Qwen3 pieces (prefix, wrapped
decoder layers, postfix with its chunked loss), taken from its wheel and adapted by
benchmarks/peer_roundpipe_ref.py's adapt_to_transformers, must reproduce transformers' own logits and loss on a
tiny random Qwen3, and backpropagate. The package itself cannot be imported without a GPU (its scheduler reads
GPU memory at import), so the two modules are loaded with their imports of roundpipe's runtime (recompute
context, the RoundPipe class, the compile switch) replaced by what a plain forward needs.
Usage: python peer_adapter_check.py <roundpipe-0.1.1 wheel> <benchmarks dir>
"""
import re
import sys
import types
import zipfile

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def load(wheel, member, replacements):
    source = zipfile.ZipFile(wheel).read(member).decode()
    for pattern, text in replacements:
        source, count = re.subn(pattern, text, source)
        if count == 0:
            sys.exit(f"FAIL: {member} no longer has {pattern!r}; update this check")
    module = types.ModuleType(member)
    exec(compile(source, member, "exec"), module.__dict__)
    return module


def main():
    wheel, benchmarks = sys.argv[1], sys.argv[2]
    sys.path.insert(0, benchmarks)
    from peer_roundpipe_ref import adapt_to_transformers

    function = load(wheel, "roundpipe/models/function.py", [
        (r"from \. import DISABLE_TORCH_COMPILE\n", "DISABLE_TORCH_COMPILE = True\n"),
        (r"from \.\.roundpipe import RoundPipe\n", "RoundPipe = None\n")])
    qwen3 = load(wheel, "roundpipe/models/qwen3.py", [
        (r"from \.\.context import [^\n]*\n",
         "doing_recompute = lambda: False\nsave_for_recompute = lambda *args: None\nget_recompute_data = None\n"),
        (r"from \.\.roundpipe import RoundPipe\n", "RoundPipe = None\n"),
        (r"from \.function import [^\n]*\n", "")])
    qwen3.CompileForCausalLMLoss = function.CompileForCausalLMLoss
    qwen3.ChunkedCompileLinearForCausalLMLoss = function.ChunkedCompileLinearForCausalLMLoss

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, use_cache=False)
    model = Qwen3ForCausalLM._from_config(config, attn_implementation="sdpa")
    adapt_to_transformers(qwen3, model)
    ids = torch.randint(0, config.vocab_size, (2, 16))

    def peer(**inputs):
        x = qwen3.Qwen3ForCausalLMPrefix(model)(input_ids=ids, labels=ids, **inputs)
        for layer in model.model.layers:
            x = qwen3.Qwen3ForCausalLMWrappedLayer(layer)(x)
        return qwen3.Qwen3ForCausalLMPostfix(model)(x)

    reference = model(input_ids=ids, labels=ids)
    logits_error = (peer().logits - reference.logits).abs().max().item()
    chunked = peer(return_logits=False)
    loss_error = abs(chunked.loss.item() - reference.loss.item())
    chunked.loss.backward()
    grads = all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    print(f"peer vs transformers: logits max |diff| {logits_error:.2e}, loss |diff| {loss_error:.2e}, "
          f"gradients {'finite' if grads else 'missing'}")
    ok = logits_error <= 1e-5 and loss_error <= 1e-5 and grads
    print("ok" if ok else "FAIL: the adapted peer does not reproduce transformers")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
