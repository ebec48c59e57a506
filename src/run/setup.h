// What the single-process trainer and the pipeline runtime set up the same way from a run config.
#pragma once

#include <memory>

#include "config/run_config.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "model/causal_lm.h"

namespace rp::run {

// model.dtype as a LibTorch dtype.
torch::ScalarType torchDtype(config::Dtype dtype);

// model.init = pretrained: the checkpoint's weights; random: transformers' initialisation (seeded by the caller).
std::shared_ptr<model::CausalLM> loadModelFor(const config::RunConfig& config, torch::ScalarType dtype);
// The same into the parameters of an existing model (bound to memory; the pipeline: the node store).
void initModelFor(const config::RunConfig& config, model::CausalLM& model);

// data.* with the model's BOS/EOS ids.
data::TokenizedCorpus loadCorpusFor(const config::RunConfig& config, const model::ModelConfig& model,
                                    const data::Tokenizer& tokenizer);

// Creates output.dir and writes the effective config there (config.effective.toml); a failed write is a
// SystemError naming the file.
void writeEffectiveConfig(const config::RunConfig& config);

}  // namespace rp::run
