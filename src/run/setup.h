// What the single-process trainer and the pipeline runtime set up the same way from a run config.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"

namespace rp::run {

// model.dtype as a LibTorch dtype.
torch::ScalarType torchDtype(config::Dtype dtype);
// The model-dtype copy the AdamW kernels write for weights of `dtype` (kNone for float32).
optim::ModelCopy modelCopyFor(torch::ScalarType dtype);
// optim.* as AdamW's settings (the trainer's and the pipeline's optimizer alike).
optim::AdamWConfig adamwConfigFor(const config::RunConfig& config);
// precision.* as the fp16 loss scaler's settings.
optim::LossScalerConfig lossScalerFor(const config::RunConfig& config);

// How the run's model holds its parameters: in `dtype`, allocated or placeholders, the base's linear weights
// packed NF4 under lora.base_dtype = "nf4".
model::ParamOptions paramOptionsFor(const config::RunConfig& config, torch::ScalarType dtype, bool allocate);
// model.init = pretrained: the checkpoint's weights; random: transformers' initialisation (seeded by the caller).
// model.path's config.json; a model.path without one is an InputError naming the key, where it was set and the
// directory it resolved to; so is a run whose microbatch cannot fit the host (checkActivationMemory).
// `nodes`: the data-parallel nodes the global batch is split over.
model::ModelConfig loadModelConfigFor(const config::RunConfig& config, std::int64_t nodes = 1);
// An InputError naming train.seq_len and the batch keys when one microbatch's activations (a lower bound, Note
// [Sizes before allocating]) exceed the host's available memory.
void checkActivationMemory(const config::RunConfig& config, const model::ModelConfig& model, std::int64_t nodes = 1);
std::shared_ptr<model::CausalLM> loadModelFor(const config::RunConfig& config, torch::ScalarType dtype);
// The same into the parameters of an existing model (bound to memory; the pipeline: the node store).
void initModelFor(const config::RunConfig& config, model::CausalLM& model);
// What would shrink the model's host memory, for the host-memory errors: 8-bit moments (optim.state_bits) where
// they are 32-bit, and "train LoRA (lora.rank), " in a full fine-tune; "store the frozen base in 4 bits
// (lora.base_dtype = \"nf4\"), " in a bf16-base LoRA run; or nothing.
std::string smallerModelHint(const config::RunConfig& config);
// The run's lora.* keys as the model's LoRA settings.
model::LoraConfig loraConfigFor(const config::RunConfig& config);

// The run's tokenizer (model.tokenizer), refused (InputError naming both sizes) where it has ids the model has no
// embedding row for: a tokenizer of another, larger vocabulary. Before the weights load, so it refuses at once.
std::unique_ptr<data::Tokenizer> loadTokenizerFor(const config::RunConfig& c, const model::ModelConfig& model);

// data.* with the model's BOS/EOS ids: the training documents, and the evaluation documents (data.eval_path
// read the same way, or data.eval_fraction of data.path's documents held out by train.seed; else empty).
struct Corpora {
  data::TokenizedCorpus train, eval;
};
Corpora loadCorporaFor(const config::RunConfig& config, const model::ModelConfig& model,
                       const data::Tokenizer& tokenizer);

// The reporting rank's warnings about the run's fit to the model and the machine, one line each:
// - train.seq_len beyond the model's max_position_embeddings (packed rows restart positions at every document,
//   so only documents longer than that meet positions the checkpoint never saw; with RoPE scaling the model
//   was made for longer ones);
// - bfloat16 or float16 computed on a CPU whose flags (/proc/cpuinfo's) lack native support (AVX512-BF16 or
//   AMX-BF16; AVX512-FP16 or AMX-FP16): LibTorch's matmuls then convert element by element, one to two orders
//   of magnitude slower than float32.
std::vector<std::string> startWarnings(const config::RunConfig& config, const model::ModelConfig& model,
                                       bool computesOnCpu, const std::string& cpuFlags);
// The flags line of /proc/cpuinfo ("" where there is none).
std::string cpuFlags();
// startWarnings for this machine, logged.
void logStartWarnings(const config::RunConfig& config, const model::ModelConfig& model, bool computesOnCpu);

// With optim.state_bits = 8, what the start's log says of the trainable tensors (name, elements) that keep 8-bit
// AdamW moments (optim::eightBitStates): how many parameters and tensors of them, or, as a warning (`warning`), that
// none does, so the setting changes nothing, with the largest tensor's size. Nothing with 32-bit states.
struct StartLine {
  bool warning;
  std::string text;
};
std::optional<StartLine> eightBitLine(const config::RunConfig& config,
                                      const std::vector<std::pair<std::string, std::size_t>>& trainable);
// eightBitLine, logged.
void logEightBitLine(const config::RunConfig& config,
                     const std::vector<std::pair<std::string, std::size_t>>& trainable);

// Creates output.dir and writes the effective config there (config.effective.toml); a failed write is a
// SystemError naming the file.
void writeEffectiveConfig(const config::RunConfig& config);

}  // namespace rp::run
