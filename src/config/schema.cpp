#include "config/schema.h"

#include "common/error.h"

namespace rp::config {

using S = std::string;
using L = std::vector<std::string>;
using I = std::int64_t;

const std::vector<KeySpec>& runSchema() {
  static const std::vector<KeySpec> schema = {
      {"model.path", Type::kString, S(), "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)",
       true},
      {"model.tokenizer", Type::kString, S(""), "tokenizer.json or its directory (default: model.path)"},
      {"model.dtype", Type::kString, S("float32"), "model weights and compute: float32 | bfloat16 | float16"},
      {"model.init", Type::kString, S("pretrained"), "pretrained (load the safetensors) | random (train from scratch)"},

      {"data.path", Type::kStringList, L(), "dataset file(s) or a pre-tokenized directory", true},
      {"data.format", Type::kString, S("text"), "text | jsonl | alpaca | sharegpt | tokenized"},
      {"data.sample_by", Type::kString, S("paragraph"), "text format: one sample per line | paragraph | document"},
      {"data.template", Type::kString, S("auto"), "chat template for alpaca/sharegpt: auto | chatml | llama3"},
      {"data.add_bos", Type::kBool, true, "prepend the tokenizer's BOS to every sample (when it has one)"},
      {"data.add_eos", Type::kBool, true, "append EOS to every plain-text sample"},
      {"data.on_bad_record", Type::kString, S("error"), "error | skip (skipped records are counted and reported)"},
      {"data.eval_path", Type::kStringList, std::vector<std::string>{},
       "evaluation files, read like data.path (eval loss every eval.every steps and at the end)"},
      {"data.eval_fraction", Type::kFloat, 0.0,
       "or hold out this fraction of data.path's documents for evaluation (0 = none; at most 0.5)"},
      {"eval.every", Type::kInt, I(0), "evaluate every N steps (0 = at the end only), when there is evaluation data"},
      {"eval.max_rows", Type::kInt, I(64), "evaluate on at most this many train.seq_len rows of the evaluation data"},

      {"train.seq_len", Type::kInt, I(256), "tokens per packed sequence"},
      {"train.global_batch", Type::kInt, I(8), "sequences per optimizer step"},
      {"train.microbatches", Type::kInt, I(1), "microbatches per step (divides global_batch)"},
      {"train.max_steps", Type::kInt, I(100), "optimizer steps to run"},
      {"train.epochs", Type::kInt, I(0),
       "stop after this many passes over the data (0 = no limit; the lr schedule still spans train.max_steps)"},
      {"train.seed", Type::kInt, I(0), "seed for shuffling, LoRA init and dropout"},
      {"train.grad_clip", Type::kFloat, 1.0, "global gradient-norm clip (0 = off)"},
      {"train.max_consecutive_skips", Type::kInt, I(25),
       "stop after this many steps in a row were skipped (non-finite loss or gradients; fp16 overflow); 0 = never"},
      {"train.loss_chunk_tokens", Type::kInt, I(0),
       "LM-head/loss chunk in tokens (0 = auto: logits about the size of the hidden states, >= 256 rows)"},
      {"train.threads", Type::kInt, I(0), "LibTorch intra-op threads (0 = RP_NUM_THREADS or LibTorch default)"},

      {"optim.lr", Type::kFloat, 1e-3, "peak learning rate"},
      {"optim.beta1", Type::kFloat, 0.9, "AdamW beta1"},
      {"optim.beta2", Type::kFloat, 0.999, "AdamW beta2"},
      {"optim.eps", Type::kFloat, 1e-8, "AdamW epsilon"},
      {"optim.weight_decay", Type::kFloat, 0.01,
       "decoupled weight decay, on every trainable tensor but those optim.no_decay names"},
      {"optim.no_decay", Type::kStringList,
       L{"bias", "layernorm", "rmsnorm", "(?:^|\\.)norm(?:$|\\.)", "_norm(?:$|\\.)"},
       "tensors without weight decay: regular expressions searched in the lowercased Hugging Face parameter name "
       "(default: Hugging Face Trainer's, biases and normalisation weights; [] = decay everywhere)"},
      {"optim.amsgrad", Type::kBool, false, "AMSGrad variant"},
      {"optim.state_bits", Type::kInt, I(32),
       "AdamW's moments: 32 (float32) | 8 (bitsandbytes' 8-bit blockwise states, for the tensors of 4,096 elements "
       "or more but the embeddings and the LM head; docs/optimizer.md, \"8-bit states\")"},
      {"optim.schedule", Type::kString, S("cosine"), "constant | linear | cosine"},
      {"optim.warmup_steps", Type::kInt, I(0), "linear warmup steps"},
      {"optim.min_lr_ratio", Type::kFloat, 0.0, "linear/cosine floor as a fraction of optim.lr"},
      {"optim.mode", Type::kString, S("sync"),
       "sync (the single-process trainer's losses) | async (the optimizer overlaps the next iterations, which "
       "compute on weights optim.staleness steps stale; pipeline runtime)"},
      {"optim.staleness", Type::kInt, I(1),
       "async: iteration t computes on the weights after step t-k-1, the optimizer up to k steps behind (1..8; "
       "0 = sync). Set alone, it decides the mode"},
      {"optim.threads", Type::kInt, I(0),
       "optimizer threads per rank (0 = the cores this process may run on, shared among the node's ranks)"},
      {"optim.shard_across_nodes", Type::kBool, false,
       "several nodes: each node keeps 1/N of the AdamW moments (reduce-scatter the gradients, update its shard, "
       "all-gather the masters); same results"},
      {"optim.split_master", Type::kBool, true,
       "sync, unsharded: the masters share the weights' memory, bit-exact: bfloat16 keeps each as its weight plus a "
       "16-bit low word (2 bytes a parameter less), float32 as its weight (4 less); false: a float32 master of its "
       "own"},

      {"pipeline.schedule", Type::kString, S("roundpipe"),
       "roundpipe | gpipe | 1f1b (baselines: weights bound to workers)"},
      {"pipeline.recompute", Type::kString, S("stage"),
       "stage | layer: backward recomputes a stage at once or layer by layer"},
      {"pipeline.recompute_ahead", Type::kInt, I(1),
       "backward microbatches whose recompute runs before their gradient arrives (0 = after it)"},
      {"pipeline.replan_every", Type::kInt, I(10), "re-partition from measured layer times every N steps (0 = never)"},
      {"pipeline.upload_chunk_mb", Type::kFloat, 256.0, "weight uploads are queued in chunks of at most this size"},
      {"pipeline.plan", Type::kString, S("auto"),
       "auto (the partitioner) or \"F1,F2,... | fused | B1,B2,...\" layer counts"},
      {"pipeline.profile", Type::kString, S(""),
       "automatic plans: start from the layer times of this profile.json (an earlier run's) instead of the FLOP "
       "estimate"},
      {"pipeline.profile_modelled", Type::kBool, false,
       "take pipeline.profile's times although an emulated device's run wrote them (its model's times, not "
       "measurements); an emulated run takes them without it"},
      {"pipeline.planner", Type::kString, S("search"),
       "automatic plans: search (the best simulated plan among the reference's and more candidates, fused tails of "
       "every size included) | reference (the reference partitioner alone)"},
      {"pipeline.dispatch", Type::kString, S("round_robin"),
       "round_robin | earliest_finish (roundpipe: each job to the worker predicted to finish it first, from the "
       "measured layer times and each worker's measured speed; for uneven GPUs)"},
      {"pipeline.memory_limit_gb", Type::kFloat, 0.0,
       "per-worker memory budget for the partitioner (0 = the GPU's free memory less the reserve; unlimited on cpu)"},
      {"pipeline.backend", Type::kString, S("auto"),
       "auto | cpu | cuda | emulated: where the workers compute (auto: cuda if a GPU is usable; emulated: a "
       "modelled GPU that computes nothing, for the host side's speed, docs/emulated.md)"},
      {"pipeline.emulated_profile", Type::kString, S("rtx4090x8"),
       "emulated: the GPU and link modelled, a hardware file (a cluster-configs/ name, or a path to a .toml)"},
      {"pipeline.emulated_host_traffic", Type::kBool, false,
       "emulated: copies also read and write the host memory a DMA would (it competes for DRAM bandwidth)"},
      {"pipeline.emulated_waits", Type::kString, S("block"),
       "emulated: the host's waits for the device sleep (\"block\", as the CUDA backend's) or spin a core "
       "(\"spin\", as CUDA's events without cudaEventBlockingSync did)"},
      {"pipeline.emulated_pinned", Type::kBool, true,
       "emulated: false: the host memory is not pinned (as where cudaHostRegister fails): copies are pageable, at "
       "the profile's link.pageable_gbps, staged by the issuing thread"},
      {"pipeline.ranks_per_gpu", Type::kInt, I(1), "cuda: ranks sharing one GPU (local rank r uses GPU r / this)"},
      {"pipeline.memory_reserve_gb", Type::kFloat, 2.0,
       "cuda: GPU memory kept for activations and the compute when the budget comes from the device"},
      {"pipeline.tensor_channel", Type::kString, S("host"),
       "host | direct | nccl: stage hand-offs through the host arena, or from GPU to GPU (direct: CUDA IPC, needs "
       "peer access; nccl: NCCL send/receive, one GPU per rank)"},
      {"pipeline.stall_timeout_s", Type::kFloat, 300.0, "a rank waiting longer than this for a peer aborts the job"},
      {"pipeline.stall_warn_s", Type::kFloat, 60.0,
       "a rank waiting longer than this logs the late rank and its last operation (if below the timeout)"},

      {"precision.loss_scale", Type::kFloat, 65536.0, "float16: initial dynamic loss scale"},
      {"precision.growth_interval", Type::kInt, I(2000), "float16: good steps before the loss scale doubles"},

      {"lora.rank", Type::kInt, I(0), "LoRA rank (0 = full fine-tune)"},
      {"lora.alpha", Type::kFloat, 16.0, "LoRA alpha (scaling = alpha / rank)"},
      {"lora.dropout", Type::kFloat, 0.0, "dropout on the LoRA input"},
      {"lora.targets", Type::kStringList, L{"q", "k", "v", "o", "gate", "up", "down"},
       "projections with adapters (MoE: gate+up and down adapt the experts, docs/moe.md; Qwen3.5's "
       "linear-attention layers: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj, docs/model.md)"},
      {"lora.base_dtype", Type::kString, S("model"),
       "the frozen base's linear weights: \"model\" (the model dtype) or \"nf4\" (QLoRA: stored 4-bit NF4 as "
       "bitsandbytes stores them, dequantized per product, docs/model.md)"},
      {"lora.double_quant", Type::kBool, false, "nf4: quantize the NF4 block scales too (bitsandbytes' double quant)"},

      {"output.dir", Type::kString, S("out"), "output directory (metrics.jsonl, config.effective.toml)"},
      {"output.log_every", Type::kInt, I(1), "print a log line every N steps"},
      {"output.peak_tflops", Type::kFloat, 0.0,
       "the whole job's peak TFLOP/s for MFU (0 = the GPUs' tensor peak from the table in docs/metrics.md; "
       "CPU runs report no MFU unless set)"},
      {"output.sample_prompt", Type::kString, S(""), "prompt for a sample before and after training"},
      {"output.sample_tokens", Type::kInt, I(48), "tokens in that sample"},
      {"output.sample_chat", Type::kBool, false,
       "render the sample prompt as a user turn with the chat template (data.template) and sample the reply"},
      {"output.sample_temperature", Type::kFloat, 0.0, "sampling temperature of the sample (0 = greedy)"},
      {"output.sample_top_p", Type::kFloat, 1.0, "nucleus (top-p) of the sample, when the temperature is > 0"},
      {"metrics.tensorboard", Type::kBool, true,
       "write TensorBoard event files of the metrics into <output.dir>/tb (docs/metrics.md)"},

      {"checkpoint.dir", Type::kString, S(""), "where checkpoints go (default: <output.dir>/checkpoints)"},
      {"checkpoint.every", Type::kInt, I(0),
       "save every N steps (0 = at the end, and when SIGTERM or SIGUSR1 arrives)"},
      {"checkpoint.at_end", Type::kBool, true,
       "save the last step when the run ends (false: benchmarks and throwaway runs; a signal still saves)"},
      {"checkpoint.keep", Type::kInt, I(3), "complete checkpoints to keep (0 = all)"},
      {"checkpoint.on_error", Type::kString, S("stop"), "a failed save: \"stop\" the run or \"continue\" without it"},
      {"checkpoint.async", Type::kBool, true, "write checkpoints on a background thread from a staged copy"},
      {"checkpoint.resume", Type::kString, S(""),
       "resume from \"latest\", \"auto\" (latest if any), a checkpoint name or a directory (--resume)"},
  };
  return schema;
}

const KeySpec& runKey(const std::string& key) {
  for (const auto& spec : runSchema()) {
    if (key == spec.key) return spec;
  }
  RP_THROW(InternalError, "config key '{}' is not in the schema", key);
}

}  // namespace rp::config
