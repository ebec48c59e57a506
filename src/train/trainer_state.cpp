// The single-process trainer's checkpoints: what it saves and how it resumes (docs/checkpoint-format.md).

#include "common/error.h"
#include "model/libtorch.h"
#include "train/trainer.h"

namespace rp::train {
namespace {

using nlohmann::json;

bool hasWeights(const checkpoint::Manifest& m, const std::string& tensor) {
  for (const auto& s : m.slices) {
    if (s.kind == checkpoint::Kind::kWeights && s.tensor == tensor) return true;
  }
  return false;
}

}  // namespace

std::vector<checkpoint::Slice> Trainer::stateSlices(const checkpoint::Manifest* saved) const {
  std::vector<checkpoint::Slice> out;
  for (std::size_t i = 0; i < trainable_.size(); ++i) {
    const auto& [name, param] = trainable_[i];
    const auto shape = param.sizes().vec();
    const std::int64_t n = param.numel();
    out.push_back({checkpoint::Kind::kMaster, name, shape, 0, n, masters_[i].data_ptr<float>()});
    moments_.add(*adamw_, i, name, shape, 0, static_cast<std::size_t>(n), saved, out);
  }
  return out;
}

std::optional<checkpoint::SaveJob> Trainer::snapshot(std::int64_t step) {
  checkpoint::SaveJob job;
  job.step = step;
  for (const auto& s : stateSlices()) {
    job.slices.push_back(checkpoint::stage(s));
  }
  // Model-dtype weights differ from the masters only in bf16/fp16 runs (rounded copies): saved then.
  if (dtype_ != torch::kFloat) {
    torch::NoGradGuard noGrad;
    for (const auto& [name, param] : trainable_) {
      const torch::Tensor f = param.detach().to(torch::kFloat).contiguous();
      job.slices.push_back(checkpoint::stage(
          {checkpoint::Kind::kWeights, name, param.sizes().vec(), 0, param.numel(), f.data_ptr<float>()}));
    }
  }
  job.manifest = run::describeRun(config_, identity_);
  job.manifest.training.update(json{{"tokens_seen", tokensSeen_},
                                    {"target_tokens_seen", targetTokensSeen_},
                                    {"optimizer", run::optimizerJson(config_, adamw_->stepCount())},
                                    {"lr_schedule", {{"kind", config_.optim.schedule}, {"step", step}}},
                                    {"loss_scaler", scaler_ ? json{{"scale", scaler_->scale()},
                                                                   {"good_steps", scaler_->goodSteps()},
                                                                   {"skipped_steps", scaler_->skippedSteps()}}
                                                            : json(nullptr)},
                                    {"data_cursor", run::cursorJson(packer_->cursor())},
                                    {"rng", json::array({{{"rank", 0}, {"torch_cpu", run::rngState()}}})},
                                    {"optim_mode", "sync"},
                                    {"workers", 1},
                                    {"nodes", 1}});
  return job;
}

void Trainer::restore(const run::Resume& r) {
  checkpoint::readSlices(r.dir, r.manifest, stateSlices(&r.manifest));
  moments_.convert(r.dir, r.manifest);
  torch::NoGradGuard noGrad;
  for (std::size_t i = 0; i < trainable_.size(); ++i) {
    auto& [name, param] = trainable_[i];
    if (dtype_ == torch::kFloat) continue;  // the parameter is the master
    if (hasWeights(r.manifest, name)) {
      torch::Tensor f = torch::empty(param.sizes(), torch::kFloat);
      checkpoint::readSlices(
          r.dir, r.manifest,
          {{checkpoint::Kind::kWeights, name, param.sizes().vec(), 0, param.numel(), f.data_ptr<float>()}});
      param.copy_(f);
    } else {
      param.copy_(masters_[i]);
    }
  }
  const json& t = r.manifest.training;
  try {
    adamw_->restoreStepCount(t.at("optimizer").at("step_count").get<std::int64_t>());
    if (scaler_ && !t.at("loss_scaler").is_null()) {
      const json& s = t.at("loss_scaler");
      scaler_->restore(s.at("scale").get<double>(), s.at("good_steps").get<std::int64_t>(),
                       s.at("skipped_steps").get<std::int64_t>());
    }
    tokensSeen_ = t.at("tokens_seen").get<std::int64_t>();
    targetTokensSeen_ = t.at("target_tokens_seen").get<std::int64_t>();
    packer_ =
        std::make_unique<data::Packer>(corpus_, config_.train.seqLen, static_cast<std::uint64_t>(config_.train.seed),
                                       run::cursorFromJson(t.at("data_cursor"), r.where()));
    run::restoreRng(t.at("rng").at(0).at("torch_cpu").get<std::string>(), r.where());
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: the training state is incomplete: {}", r.where(), e.what());
  }
  startStep_ = r.manifest.step;
}

}  // namespace rp::train
