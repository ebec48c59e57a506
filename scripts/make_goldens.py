#!/usr/bin/env python3
"""Writes the reference ("golden") files the C++ golden tests compare against.

The reference is Hugging Face transformers (eager attention, float32). For each model this writes
<out>/<name>/golden.safetensors holding:
  input_ids [B, T] int64, logits [B, T, V], token_loss [B, T-1] (next-token cross-entropy), loss [] (mean),
  grad.<hf parameter name> for every parameter (gradient of `loss`),
and, for the generated models, the checkpoint itself (<out>/<name>/config.json + model.safetensors).
Models:
  tinystories-656k  the real fixture checkpoint (skipped when the fixtures are absent); its input ids
                    come from the HF tokenizer on the first line of text/tinystories_sample.txt, and
                    tokenizer_cases.json records HF ids for more lines, for the tokenizer test.
  qwen3-tiny        a random Qwen3ForCausalLM (3 layers, hidden 64, head_dim 32, GQA 4/2, tied embeddings)
                    with two extra documents run separately (doc_a/doc_b logits) for the packing test.
  llama3-tiny       a random LlamaForCausalLM with llama3 rope scaling, MQA, biases, untied head, with
                    packed-document goldens.
  qwen3-moe-tiny    a random Qwen3MoeForCausalLM (8 experts, top 2 renormalised, layer 1 dense via mlp_only_layers,
                    the load-balancing loss on with coefficient 0.05); `loss` includes it, `aux_loss` is the
                    coefficient times it. save_pretrained stores the experts one tensor each, as published.
                    Its vocabulary is TinyStories' (2048) so runs can use that tokenizer (the export test). With
                    packed-document goldens.
  gpt-oss-tiny      a random GptOssForCausalLM (8 experts, top 2, attention sinks, sliding window 6 on layers 0 and
                    2, YaRN rope as published, swiglu_limit 0.5 so the clamps bite, the load-balancing loss on with
                    coefficient 0.05), with packed-document goldens (the window inside documents).
  gpt-oss-mxfp4     gpt-oss-tiny's checkpoint with its experts stored MXFP4-quantized (random codes and scales,
                    as published GPT-OSS checkpoints store them) and `dequantized.<name>`: transformers'
                    convert_moe_packed_tensors of each, in float32.
  <model>-nf4       llama3-tiny (double quantisation), qwen3-tiny, qwen3-moe-tiny and the tinystories-656k fixture
                    (without) loaded by transformers with bitsandbytes 4-bit NF4 (BitsAndBytesConfig, compute
                    in float32, on the CPU) and saved with save_pretrained, as QLoRA users' bases are;
                    golden.safetensors holds that model's logits on random ids.
  <model>-lora      for qwen3-tiny, qwen3-moe-tiny and gpt-oss-tiny: a PEFT LoRA adapter (rank 2, alpha 4, random
                    non-zero A and B) on q_proj and v_proj and on the MLP (the experts' gate_up_proj and down_proj
                    through target_parameters on the MoE models), saved with save_pretrained, and the adapted
                    model's logits, loss and the gradient of every adapter tensor under its saved name.
  optim/            torch.optim.AdamW on random tensors (two hyper-parameter sets, 100 steps, the grads of every
                    step stored; and adamw_groups: Hugging Face Trainer's decay / no-decay parameter groups on a
                    module with a bias and two norms), transformers' LR schedules sampled per step, and the fixture's AdamW
                    reference weights (optim/test_adamw.npz) re-encoded as safetensors; bitsandbytes' 8-bit
                    blockwise quantization and 8-bit AdamW (q8, adamw8: scripts/goldens_optim8.py).
  tokenizers/       Hugging Face tokenizers' ids and decodes for the Qwen3, TinyStories and built-in
                    tokenizers on 3000 lines of tiny-shakespeare, the TinyStories sample and Unicode edge cases,
                    and the chat templates' renderings and ids (scripts/goldens_text.py); tokenizers/chat/: a
                    tokenizer of each family's kind with its special tokens, for its templates' ids.
Every model directory also gets decay_names.json: the parameters Hugging Face Trainer decays
(Trainer.get_decay_parameter_names). versions.json records the library versions used.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

import bnb_reference
from goldens_optim8 import optim8_goldens
from goldens_text import chat_template_goldens, chat_token_goldens, tokenizer_goldens


def perturb(model, seed):
    """Random weights everywhere, norms included (all-ones norms would hide bugs in their use). Linear attention's
    decays slow, as trained models have them (per token exp(-A * softplus(a + dt_bias)), A from 0.01 to 4 over the
    heads, dt_bias near -2): the state then carries from chunk to chunk, which the default draws would erase."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.linspace(0.01, 4.0, p.numel()).log())
            elif name.endswith("dt_bias"):
                p.copy_(-2.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def reference(model, input_ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    logits = out.logits.detach().float()
    token_loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), input_ids[:, 1:].reshape(-1), reduction="none"
    ).reshape(input_ids.size(0), -1)
    tensors = {
        "input_ids": input_ids.contiguous(),
        "logits": logits.contiguous(),
        "token_loss": token_loss.contiguous(),
        "loss": out.loss.detach().float().reshape(()),
    }
    if getattr(out, "aux_loss", None) is not None:
        coef = model.config.router_aux_loss_coef
        tensors["aux_loss"] = (coef * out.aux_loss.detach().float()).reshape(())
    for name, p in model.named_parameters():
        if text_name(name) is not None:
            tensors["grad." + text_name(name)] = p.grad.detach().float().contiguous()
    return tensors


def text_name(name):
    """A parameter's name in the text model: a multimodal Gemma 3's or Qwen3.5's language model as their ForCausalLM
    classes name it (model.language_model.X -> model.X), None for the vision side; any other name as it is."""
    if name.startswith(("model.vision_tower.", "model.multi_modal_projector.", "model.visual.")):
        return None
    return name.replace("model.language_model.", "model.", 1)


def write(out_dir, tensors, model=None):
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "golden.safetensors"))
    if model is not None:
        with open(os.path.join(out_dir, "decay_names.json"), "w") as f:
            json.dump(decay_names(model), f)


def decay_names(model):
    """The parameters Hugging Face Trainer applies weight decay to (its own function; `self` is unused)."""
    names = (text_name(n) for n in transformers.Trainer.get_decay_parameter_names(None, model))
    return sorted(n for n in names if n is not None)


def tinystories(fixtures, out):
    model_dir = os.path.join(fixtures, "models", "tinystories-656k")
    if not os.path.isdir(model_dir):
        print(f"make_goldens: {model_dir} absent, skipping tinystories-656k", file=sys.stderr)
        return
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(fixtures, "text", "tinystories_sample.txt"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    ids = torch.tensor([tok.encode(lines[0]).ids[:64]], dtype=torch.int64)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                          attn_implementation="eager")
    target = os.path.join(out, "tinystories-656k")
    write(target, reference(model, ids), model)
    cases = [{"text": line, "ids": tok.encode(line).ids} for line in lines]
    with open(os.path.join(target, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)


def generated(name, config, seed, out, with_docs=False):
    torch.manual_seed(seed)
    model = config_to_model(config)
    perturb(model, seed)
    target = os.path.join(out, name)
    model.save_pretrained(target, safe_serialization=True)
    g = torch.Generator().manual_seed(seed + 1)
    text = config.get_text_config()
    ids = torch.randint(text.vocab_size, (2, 24), generator=g)
    if getattr(text, "pad_token_id", None) is not None:
        ids[0, 3] = text.pad_token_id  # the embedding's padding_idx row: no gradient from the lookup
    tensors = reference(model, ids)
    if with_docs:
        with torch.no_grad():
            doc_a = torch.randint(text.vocab_size, (1, 10), generator=g)
            doc_b = torch.randint(text.vocab_size, (1, 14), generator=g)
            tensors["doc_a_ids"] = doc_a
            tensors["doc_b_ids"] = doc_b
            tensors["doc_a_logits"] = model(input_ids=doc_a).logits.float().contiguous()
            tensors["doc_b_logits"] = model(input_ids=doc_b).logits.float().contiguous()
    if "linear_attention" in (getattr(text, "layer_types", None) or []):
        # Linear attention carries its state from chunk to chunk of 64 tokens: a row of three chunks and a bit.
        long_ids = torch.randint(text.vocab_size, (1, 200), generator=g)
        long = reference(model, long_ids)
        tensors.update({"long." + k: t for k, t in long.items()})
    # transformers in bfloat16, the model loaded as a user loads it in that dtype (its default attention, SDPA where
    # the family has it): the same ids' logits, loss and gradients, against which ours in bfloat16 are held.
    low = transformers.AutoModelForCausalLM.from_pretrained(target, dtype=torch.bfloat16).eval()
    tensors.update({"bf16." + k: t for k, t in reference(low, ids).items() if k != "input_ids"})
    write(target, tensors, model)


def lora_golden(name, seed, out):
    """A PEFT LoRA adapter with random factors on the model generated as `name`, and the adapted model's goldens."""
    import peft

    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(out, name), dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    moe = model.config.model_type in ("qwen3_moe", "gpt_oss")
    targets = dict(target_modules=["q_proj", "v_proj"],
                   target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]) if moe else dict(
        target_modules=["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"])
    model = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, lora_dropout=0.0, **targets))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    target = os.path.join(out, name + "-lora")
    model.save_pretrained(target, safe_serialization=True)
    ids = torch.randint(model.config.vocab_size, (2, 24), generator=g)
    result = model(input_ids=ids, labels=ids)
    result.loss.backward()
    tensors = {"input_ids": ids, "logits": result.logits.detach().float().contiguous(),
               "loss": result.loss.detach().float().reshape(())}
    for n, p in model.named_parameters():
        if p.requires_grad:
            tensors["grad." + n.replace(".default.", ".")] = p.grad.detach().float().contiguous()
    write(target, tensors)


def config_to_model(config):
    classes = {"qwen3": transformers.Qwen3ForCausalLM, "qwen3_moe": transformers.Qwen3MoeForCausalLM,
               "llama": transformers.LlamaForCausalLM, "gpt_oss": transformers.GptOssForCausalLM,
               "qwen2": transformers.Qwen2ForCausalLM, "mistral": transformers.MistralForCausalLM,
               "granite": transformers.GraniteForCausalLM, "gemma2": transformers.Gemma2ForCausalLM,
               "phi3": transformers.Phi3ForCausalLM, "olmo2": transformers.Olmo2ForCausalLM,
               "glm4": transformers.Glm4ForCausalLM, "gemma3_text": transformers.Gemma3ForCausalLM,
               "gemma3": transformers.Gemma3ForConditionalGeneration,
               "qwen3_5_text": transformers.Qwen3_5ForCausalLM,
               "qwen3_5": transformers.Qwen3_5ForConditionalGeneration}
    return classes[config.model_type](config).float().eval()


def mxfp4_checkpoint(source, out):
    """The checkpoint at `source` with each stacked expert tensor replaced by random MXFP4 blocks and scales."""
    from safetensors.torch import load_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    tensors = load_file(os.path.join(source, "model.safetensors"))
    g = torch.Generator().manual_seed(97)
    dequantized = {}
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        experts, k, n = tensors.pop(name).shape
        blocks = torch.randint(0, 256, (experts, n, k // 32, 16), generator=g, dtype=torch.uint8)
        scales = torch.randint(120, 131, (experts, n, k // 32), generator=g, dtype=torch.uint8)
        tensors[name + "_blocks"] = blocks
        tensors[name + "_scales"] = scales
        dequantized["dequantized." + name] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"))
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                     "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write(out, dequantized)


def nf4_checkpoint(source, name, double_quant, out):
    """The checkpoint at `source` loaded in 4-bit NF4 by transformers and bitsandbytes, saved as <name>-nf4, and
    its logits on random ids."""
    if not os.path.isdir(source):
        print(f"make_goldens: {source} absent, skipping {name}-nf4", file=sys.stderr)
        return
    bnb_reference.use_generic_cpu_kernels()
    config = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                             bnb_4bit_use_double_quant=double_quant,
                                             bnb_4bit_compute_dtype=torch.float32)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        source, quantization_config=config, device_map="cpu", attn_implementation="eager").eval()
    bnb_reference.without_packed_inference(model)
    target = os.path.join(out, name + "-nf4")
    model.save_pretrained(target, safe_serialization=True)
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(model.config.vocab_size, (2, 24), generator=g)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().contiguous()
    write(target, {"input_ids": ids, "logits": logits})


def optimizer_goldens(fixtures, out):
    target = os.path.join(out, "optim")
    os.makedirs(target, exist_ok=True)
    shapes = [(37,), (8, 9), (5, 4, 3)]
    cases = {"default": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False),
             "amsgrad": dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True)}
    for name, hyper in cases.items():
        g = torch.Generator().manual_seed(7)
        params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
        tensors = {f"init.{i}": p.detach().clone() for i, p in enumerate(params)}
        opt = torch.optim.AdamW(params, **hyper)
        steps = 100
        grads = [torch.empty((steps,) + s) for s in shapes]
        for t in range(steps):
            for i, p in enumerate(params):
                p.grad = torch.randn(shapes[i], generator=g) * (1.0 + t % 3)
                grads[i][t] = p.grad
            opt.step()
        for i, p in enumerate(params):
            tensors[f"grads.{i}"] = grads[i]
            tensors[f"final.{i}"] = p.detach().clone()
            tensors[f"exp_avg.{i}"] = opt.state[p]["exp_avg"].clone()
        save_file(tensors, os.path.join(target, f"adamw_{name}.safetensors"))
        with open(os.path.join(target, f"adamw_{name}.json"), "w") as f:
            json.dump({k: list(v) if isinstance(v, tuple) else v for k, v in hyper.items()}, f)
    adamw_groups(target)
    optim8_goldens(target)

    dummy = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)
    schedules = {}
    for kind, make in (("constant", transformers.get_constant_schedule_with_warmup),
                       ("linear", transformers.get_linear_schedule_with_warmup),
                       ("cosine", transformers.get_cosine_schedule_with_warmup)):
        sched = make(dummy, 10) if kind == "constant" else make(dummy, 10, 100)
        schedules[f"lr.{kind}"] = torch.tensor([2e-3 * sched.lr_lambdas[0](t) for t in range(100)],
                                               dtype=torch.float64)
    save_file(schedules, os.path.join(target, "lr_schedules.safetensors"))

    npz = os.path.join(fixtures, "optim", "test_adamw.npz")
    if os.path.exists(npz):
        import numpy as np

        save_file({"weight": torch.from_numpy(np.load(npz)["array"].copy())},
                  os.path.join(target, "adamw_fixture.safetensors"))


class _Norm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n))


def adamw_groups(target):
    """torch.optim.AdamW with Hugging Face Trainer's two parameter groups (weight decay on the names
    get_decay_parameter_names returns, 0 on the rest), on a module with a bias, a norm and a weight."""
    model = torch.nn.Module()
    model.up_proj = torch.nn.Linear(8, 9, bias=True)
    model.post_attention_layernorm = _Norm(37)
    model.q_norm = _Norm(6)
    g = torch.Generator().manual_seed(11)
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    with torch.no_grad():
        for p in params.values():
            p.copy_(torch.randn(p.shape, generator=g))
    decay = set(decay_names(model))
    hyper = dict(lr=2e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.3, amsgrad=False)
    opt = torch.optim.AdamW([{"params": [params[n] for n in names if n in decay]},
                             {"params": [params[n] for n in names if n not in decay], "weight_decay": 0.0}], **hyper)
    tensors = {f"init.{i}": params[n].detach().clone() for i, n in enumerate(names)}
    steps = 50
    grads = [torch.empty((steps,) + tuple(params[n].shape)) for n in names]
    for t in range(steps):
        for i, n in enumerate(names):
            params[n].grad = torch.randn(params[n].shape, generator=g)
            grads[i][t] = params[n].grad
        opt.step()
    for i, n in enumerate(names):
        tensors[f"grads.{i}"] = grads[i]
        tensors[f"final.{i}"] = params[n].detach().clone()
        tensors[f"exp_avg.{i}"] = opt.state[params[n]]["exp_avg"].clone()
    save_file(tensors, os.path.join(target, "adamw_groups.safetensors"))
    with open(os.path.join(target, "adamw_groups.json"), "w") as f:
        json.dump({**{k: list(v) if isinstance(v, tuple) else v for k, v in hyper.items()},
                   "names": names, "decay": [n in decay for n in names]}, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixtures", required=True, help="the shared fixtures directory")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)

    tinystories(args.fixtures, args.out)
    optimizer_goldens(args.fixtures, args.out)
    tokenizer_goldens(args.fixtures, args.out)
    chat_template_goldens(args.fixtures, args.out)
    chat_token_goldens(args.fixtures, args.out)
    qwen3 = transformers.Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, attn_implementation="eager")
    generated("qwen3-tiny", qwen3, 1234, args.out, with_docs=True)
    # Qwen2 (Qwen2.5 and its derivatives): Llama with biases on q/k/v (not o_proj), tied like the small sizes; the
    # TinyStories vocabulary's size, so that the export test trains it on that tokenizer.
    qwen2 = transformers.Qwen2Config(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, use_sliding_window=False, attn_implementation="eager")
    generated("qwen2-tiny", qwen2, 2222, args.out, with_docs=True)
    # Qwen2 with use_sliding_window: layers from max_window_layers (1) on attend within 6 positions.
    qwen2_window = transformers.Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, use_sliding_window=True, sliding_window=6, max_window_layers=1,
        attn_implementation="eager")
    generated("qwen2-window-tiny", qwen2_window, 2323, args.out, with_docs=True)
    # Mistral: an explicit head_dim that is not hidden / heads (as Nemo's 128 with hidden 5120 and 32 heads), a
    # window on every layer (as 7B v0.1's 4096), untied; the TinyStories vocabulary's size for the export test.
    mistral = transformers.MistralConfig(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e6,
        sliding_window=8, tie_word_embeddings=False, attn_implementation="eager")
    generated("mistral-tiny", mistral, 3131, args.out, with_docs=True)
    # Granite 3.x dense: Llama with Granite 3.1-8B's multipliers (the embedding x12, each sublayer's output x0.22,
    # scores x1/128 in place of 1/sqrt(head_dim), logits / 16), tied; the TinyStories vocabulary's size.
    granite = transformers.GraniteConfig(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e7,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125, logits_scaling=16.0,
        tie_word_embeddings=True, attn_implementation="eager")
    generated("granite-tiny", granite, 4141, args.out, with_docs=True)
    # Gemma 2: head_dim apart from hidden / heads and the score scale from query_pre_attn_scalar apart from both
    # (as the 27B's 144 against its head_dim 128), layer 0 sliding, layer 1 full, GeGLU, (1 + w) norms, four a
    # layer; soft-caps low enough to bite on a random model (the released 50 and 30 would barely touch it).
    gemma2 = transformers.Gemma2Config(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24, max_position_embeddings=256,
        rms_norm_eps=1e-6, sliding_window=6, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
        tie_word_embeddings=True, attn_implementation="eager")
    generated("gemma2-tiny", gemma2, 5151, args.out, with_docs=True)
    # Gemma 3 (1B proportions): Gemma 2 without soft-capping, with (1 + w) q/k norms per head and two RoPE contexts:
    # the sliding layers' base 1e4, the full layers' 1e6 scaled linearly x8 (as the 4B and up); two local layers to
    # one global here (the released pattern is five to one), each local within 6 positions.
    gemma3 = transformers.Gemma3TextConfig(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24, max_position_embeddings=256,
        rms_norm_eps=1e-6, sliding_window=6, sliding_window_pattern=3, rope_theta=1e6, rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, tie_word_embeddings=True, attn_implementation="eager")
    generated("gemma3-tiny", gemma3, 5252, args.out, with_docs=True)
    # A multimodal Gemma 3 checkpoint (Gemma3ForConditionalGeneration, as the 4B and up are published): the same text
    # model under text_config and language_model.model.*, beside a tiny SigLIP tower the runtime leaves alone.
    vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14)
    gemma3_multimodal = transformers.Gemma3Config(
        text_config=gemma3.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=1,
        boi_token_index=2045, eoi_token_index=2046, image_token_index=2047, attn_implementation="eager")
    generated("gemma3-multimodal-tiny", gemma3_multimodal, 5353, args.out, with_docs=True)
    # Qwen3.5 (dense): three Gated DeltaNet layers to one full-attention layer (as released), the full layer's
    # q_proj with an output gate, (1 + w) norms, RoPE on a quarter of each head; two value heads to each q/k head.
    qwen35 = transformers.Qwen3_5TextConfig(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-6,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, tie_word_embeddings=False, attn_implementation="eager",
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 2], "mrope_interleaved": True})
    generated("qwen3_5-tiny", qwen35, 3535, args.out, with_docs=True)
    # As Qwen3.5 is published (Qwen3_5ForConditionalGeneration): the text model under model.language_model.*, beside
    # a tiny vision tower (model.visual.*) the runtime leaves alone.
    qwen35_vision = transformers.Qwen3_5VisionConfig(
        depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64, patch_size=2,
        spatial_merge_size=1, temporal_patch_size=1, num_position_embeddings=16)
    qwen35_multimodal = transformers.Qwen3_5Config(
        text_config=qwen35.to_dict(), vision_config=qwen35_vision.to_dict(), image_token_id=2047,
        video_token_id=2046, vision_start_token_id=2045, vision_end_token_id=2044, attn_implementation="eager")
    generated("qwen3_5-multimodal-tiny", qwen35_multimodal, 3636, args.out, with_docs=True)
    # Phi-3 (Phi-3.5-mini, Phi-4-mini proportions): fused qkv_proj and gate_up_proj, RoPE on the first 0.75 of each
    # head, LongRoPE from 16 positions (the golden's 24 take the long factors, its documents of 10 and 14 the short
    # ones), a window of 10 on every layer, untied, pad_token_id 0 (the embedding's padding_idx).
    phi3 = transformers.Phi3Config(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, partial_rotary_factor=0.75, max_position_embeddings=64,
        original_max_position_embeddings=16, sliding_window=10, tie_word_embeddings=False, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager",
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 3.0],
                      "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 8.0]})
    generated("phi3-tiny", phi3, 6161, args.out, with_docs=True)
    # OLMo 2: no pre-norms (norms on the sublayers' outputs), q/k norms over the whole projections, RoPE in
    # float32, untied, Olmo2Config's pad_token_id 1 (the embedding's padding_idx).
    olmo2 = transformers.Olmo2Config(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=5e5,
        tie_word_embeddings=False, pad_token_id=1, bos_token_id=None, eos_token_id=2, attn_implementation="eager")
    generated("olmo2-tiny", olmo2, 7171, args.out, with_docs=True)
    # GLM-4 (0414): norms on the sublayers' outputs besides the pre-norms, fused gate_up_proj, q/k/v biases and
    # none on o_proj, RoPE on interleaved pairs of the first half of each head; pad_token_id 0 (its padding_idx).
    glm4 = transformers.Glm4Config(
        vocab_size=2048, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5, attention_bias=True,
        tie_word_embeddings=False, pad_token_id=0, eos_token_id=2, attn_implementation="eager")
    generated("glm4-tiny", glm4, 8181, args.out, with_docs=True)
    llama3 = transformers.LlamaConfig(
        vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-5, attention_bias=True, mlp_bias=True,
        tie_word_embeddings=False, attn_implementation="eager",
        rope_scaling={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    generated("llama3-tiny", llama3, 4321, args.out, with_docs=True)
    qwen3_moe = transformers.Qwen3MoeConfig(
        vocab_size=2048, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        output_router_logits=True, router_aux_loss_coef=0.05, tie_word_embeddings=False,
        attn_implementation="eager")
    generated("qwen3-moe-tiny", qwen3_moe, 2468, args.out, with_docs=True)
    gpt_oss = transformers.GptOssConfig(
        vocab_size=2048, hidden_size=64, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=131072, rms_norm_eps=1e-5, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=6, swiglu_limit=0.5, output_router_logits=True,
        router_aux_loss_coef=0.05, tie_word_embeddings=False, attn_implementation="eager")
    generated("gpt-oss-tiny", gpt_oss, 8642, args.out, with_docs=True)
    mxfp4_checkpoint(os.path.join(args.out, "gpt-oss-tiny"), os.path.join(args.out, "gpt-oss-mxfp4"))
    for i, name in enumerate(("qwen3-tiny", "qwen3-moe-tiny", "gpt-oss-tiny")):
        lora_golden(name, 97 + i, args.out)
    nf4_checkpoint(os.path.join(args.out, "llama3-tiny"), "llama3-tiny", True, args.out)
    nf4_checkpoint(os.path.join(args.out, "qwen3-tiny"), "qwen3-tiny", False, args.out)
    nf4_checkpoint(os.path.join(args.out, "qwen3-moe-tiny"), "qwen3-moe-tiny", False, args.out)
    nf4_checkpoint(os.path.join(args.fixtures, "models", "tinystories-656k"), "tinystories-656k", False, args.out)

    with open(os.path.join(args.out, "versions.json"), "w") as f:
        import bitsandbytes
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "bitsandbytes": bitsandbytes.__version__}, f)
    print(f"make_goldens: wrote {args.out} (torch {torch.__version__}, transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
