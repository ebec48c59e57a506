// The text sample a run prints before and after training (output.sample_*; docs/config.md), shared by the
// single-process trainer and the pipeline runtime: greedy or temperature / top-p, seeded from train.seed, and
// with output.sample_chat the prompt as a user turn through the run's chat template (data.template).
#pragma once

#include <string>

#include "config/run_config.h"
#include "data/tokenizer.h"
#include "model/causal_lm.h"

namespace rp::run {

std::string sample(model::CausalLM& model, const data::Tokenizer& tokenizer, const config::RunConfig& config,
                   const std::string& prompt);

}  // namespace rp::run
