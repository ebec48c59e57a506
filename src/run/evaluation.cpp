#include "run/evaluation.h"

#include <algorithm>

#include "model/batch.h"
#include "model/libtorch.h"

namespace rp::run {

std::vector<data::PackedRow> evalRows(const config::RunConfig& c, const data::TokenizedCorpus& eval) {
  if (eval.tokens.empty()) return {};
  const auto cover = static_cast<std::int64_t>((eval.tokens.size() + static_cast<std::size_t>(c.train.seqLen) - 1) /
                                               static_cast<std::size_t>(c.train.seqLen));
  data::Packer packer(eval, c.train.seqLen, static_cast<std::uint64_t>(c.train.seed));
  auto rows = packer.next(std::min(cover, c.eval.maxRows));
  // The last row runs past the set's end into the packer's reshuffled second pass: those tokens are not scored, so
  // every evaluated token counts once.
  const auto seqLen = static_cast<std::size_t>(c.train.seqLen);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < seqLen; ++i) {
      if (r * seqLen + i >= eval.tokens.size()) rows[r].targets[i] = data::kNoTarget;
    }
  }
  return rows;
}

EvalResult evaluate(model::CausalLM& model, const std::vector<data::PackedRow>& rows, std::int64_t rowsPerBatch,
                    std::int64_t lossChunkTokens) {
  torch::NoGradGuard noGrad;
  const bool training = model.is_training();
  model.eval();
  double sum = 0.0;
  EvalResult r;
  const auto per = static_cast<std::size_t>(std::max<std::int64_t>(1, rowsPerBatch));
  for (std::size_t begin = 0; begin < rows.size(); begin += per) {
    const model::LossSum loss =
        model.loss(model::toBatch(rows, begin, std::min(rows.size(), begin + per)), lossChunkTokens);
    sum += loss.sum.item<double>();
  }
  for (const auto& row : rows) r.targetTokens += row.targetCount();
  model.train(training);
  r.loss = sum / static_cast<double>(std::max<std::int64_t>(1, r.targetTokens));
  return r;
}

bool evalDue(const config::RunConfig& c, std::int64_t steps) {
  return steps > 0 && ((c.eval.every > 0 && steps % c.eval.every == 0) || steps == c.train.maxSteps);
}

}  // namespace rp::run
