#include "run/setup.h"

#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/error.h"
#include "common/log.h"
#include "data/dataset.h"

namespace rp::run {

torch::ScalarType torchDtype(config::Dtype dtype) {
  switch (dtype) {
    case config::Dtype::kBFloat16:
      return torch::kBFloat16;
    case config::Dtype::kFloat16:
      return torch::kHalf;
    case config::Dtype::kFloat32:
      break;
  }
  return torch::kFloat;
}

optim::ModelCopy modelCopyFor(torch::ScalarType dtype) {
  if (dtype == torch::kBFloat16) return optim::ModelCopy::kBFloat16;
  if (dtype == torch::kHalf) return optim::ModelCopy::kFloat16;
  RP_CHECK(dtype == torch::kFloat, "model dtype {} (expected float32, bfloat16 or float16)", c10::toString(dtype));
  return optim::ModelCopy::kNone;
}

optim::LossScalerConfig lossScalerFor(const config::RunConfig& c) {
  return {c.precision.lossScale, 2.0, 0.5, c.precision.growthInterval};
}

std::shared_ptr<model::CausalLM> loadModelFor(const config::RunConfig& c, torch::ScalarType dtype) {
  auto model = std::make_shared<model::CausalLM>(model::loadModelConfig(c.model.path), dtype);
  initModelFor(c, *model);
  return model;
}

model::LoraConfig loraConfigFor(const config::RunConfig& c) {
  return {c.lora.rank, c.lora.alpha, c.lora.dropout, c.lora.targets};
}

void initModelFor(const config::RunConfig& c, model::CausalLM& model) {
  if (!c.model.randomInit) {
    model::loadHfWeights(model, c.model.path);
    return;
  }
  model::initRandom(model);
  RP_LOG_INFO("{}: model.init = random: training from scratch (initializer_range {})", c.model.path,
              model.config().initializerRange);
}

Corpora loadCorporaFor(const config::RunConfig& c, const model::ModelConfig& model, const data::Tokenizer& tokenizer) {
  data::DatasetOptions d;
  d.paths = c.data.paths;
  d.format = c.data.format;
  d.sampleBy = c.data.sampleBy;
  d.chatTemplate = c.data.chatTemplate;
  d.addBos = c.data.addBos;
  d.addEos = c.data.addEos;
  d.skipBadRecords = c.data.skipBadRecords;
  d.bosId = static_cast<std::int32_t>(model.bosTokenId);
  d.eosId = static_cast<std::int32_t>(model.eosTokenId);
  Corpora out;
  out.train = data::loadDataset(d, tokenizer);
  if (c.data.evalFraction > 0) {
    std::tie(out.train, out.eval) =
        data::holdOut(out.train, c.data.evalFraction, static_cast<std::uint64_t>(c.train.seed));
    RP_LOG_INFO("evaluation: {} of {} documents held out (data.eval_fraction = {})", out.eval.documentCount(),
                out.eval.documentCount() + out.train.documentCount(), c.data.evalFraction);
  } else if (!c.data.evalPaths.empty()) {
    d.paths = c.data.evalPaths;
    d.names.path = "data.eval_path";
    out.eval = data::loadDataset(d, tokenizer);
  }
  return out;
}

void writeEffectiveConfig(const config::RunConfig& c) {
  std::filesystem::create_directories(c.output.dir);
  const auto path = std::filesystem::path(c.output.dir) / "config.effective.toml";
  std::ofstream out(path);
  for (const auto& line : c.values.describe()) out << line << '\n';
  out.flush();
  if (!out) RP_THROW(SystemError, "{}: cannot write the effective config", path.string());
}

}  // namespace rp::run
