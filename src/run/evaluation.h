// Evaluation (docs/training.md, "Evaluation"): the mean next-token loss of the current weights on held-out
// data — data.eval_path, or data.eval_fraction of the training documents — every eval.every steps and at the
// end, shared by the single-process trainer and the pipeline runtime (which evaluates on rank 0 with the
// masters from the node store).
#pragma once

#include <cstdint>
#include <vector>

#include "config/run_config.h"
#include "data/corpus.h"
#include "data/packer.h"
#include "model/causal_lm.h"
#include "run/loop.h"

namespace rp::run {

// The evaluation rows: the evaluation documents packed into train.seq_len rows from the start, enough to
// cover them once, at most eval.max_rows. Empty without evaluation data.
std::vector<data::PackedRow> evalRows(const config::RunConfig& config, const data::TokenizedCorpus& eval);

// `model` on `rows` in batches of `rowsPerBatch`, without gradients, in evaluation mode (no dropout).
EvalResult evaluate(model::CausalLM& model, const std::vector<data::PackedRow>& rows, std::int64_t rowsPerBatch,
                    std::int64_t lossChunkTokens);

// Whether the run evaluates after `steps` steps: every eval.every steps, and at the last step.
bool evalDue(const config::RunConfig& config, std::int64_t steps);

}  // namespace rp::run
