// The pipeline runtime's checkpoints (docs/checkpoint-format.md): node 0's ranks each save their optimizer
// slices of the node store; every rank restores the slices it owns under its own layout, so a checkpoint
// resumes with any number of workers. And the state a run ends with: finish() publishes the final masters,
// storeWeight reads them back.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "engine/regions.h"
#include "engine/runtime.h"
#include "model/libtorch.h"
#include "model/nf4.h"
#include "optim/adamw.h"
#include "trace/formats.h"

namespace rp::engine {

using nlohmann::json;
using namespace detail;

void PipelineRuntime::writeProfile() const {
  const coordinator::LayerProfile& p = coordination_->profile();
  if (!p.ready()) return;  // baselines, or too few steps
  trace::LayerProfileFile out;
  for (int l = 0; l < model_->layerCount(); ++l) {
    out.forwardMs.push_back(p.forward(l));
    out.backwardMs.push_back(std::max(0.0, p.backward(l) - p.forward(l)));  // measured: recompute + backward
  }
  out.plan = schedule::formatPlan(plan_);
  out.workers = workers_;
  out.microbatches = config_.train.microbatches;
  out.device = deviceLabel_;
  trace::writeLayerProfile((std::filesystem::path(config_.output.dir) / "profile.json").string(), out);
}

std::optional<run::CheckpointWriters> PipelineRuntime::checkpointWriters() const {
  // Node 0's ranks write checkpoints; the other nodes hold replicas of node 0's state. Sharded across nodes
  // (Note [Sharded optimizer]) every rank writes its shard.
  if (shardedAcrossNodes()) return run::CheckpointWriters{worldChannel_.get(), worldRank_};
  if (id_.node != 0) return std::nullopt;
  return run::CheckpointWriters{channel_.get(), worldRank_};
}

std::optional<checkpoint::SaveJob> PipelineRuntime::snapshot(std::int64_t steps) {
  const auto& c = config_;
  optimizer_->waitFor(steps - 1);  // the optimizer is idle: its slices hold the state after `steps` steps
  if (!checkpointWriters()) return std::nullopt;
  checkpoint::SaveJob job;
  job.step = steps;
  // In async mode the weights the next k iterations upload (W_{t-k} .. W_{t-1}) differ from the masters (W_t):
  // saved too.
  for (const auto& s : optimizer_->stateSlices(steps, c.optim.async(), OptimizerWorker::Purpose::kSave)) {
    job.slices.push_back(checkpoint::stage(s));
  }
  optimizer_->releaseStagedWeights();  // copied: k float32 copies of this rank's bf16/fp16 weights otherwise stay
  if (leader_) {
    job.manifest = run::describeRun(c, identity_);
    job.manifest.training.update(json{{"tokens_seen", tokensSeen_},
                                      {"target_tokens_seen", targetTokensSeen_},
                                      {"optimizer", run::optimizerJson(c, optimizer_->stepCount())},
                                      {"lr_schedule", {{"kind", c.optim.schedule}, {"step", steps}}},
                                      {"loss_scaler", scalerJson()},
                                      {"data_cursor", run::cursorJson(packer_->cursor())},
                                      // Every rank draws the same random numbers (the pipeline has no dropout).
                                      {"rng", json::array({{{"rank", 0}, {"torch_cpu", run::rngState()}}})},
                                      {"optim_mode", c.optim.async() ? "async" : "sync"},
                                      {"optim_staleness", c.optim.staleness},
                                      {"workers", workers_},
                                      {"nodes", id_.nodeCount},
                                      {"dispatch_counter", coordination_->counter()}});
  }
  return job;
}

json PipelineRuntime::scalerJson() const {
  const optim::LossScaler* s = optimizer_->scaler();
  if (s == nullptr) return nullptr;
  return {{"scale", s->scale()}, {"good_steps", s->goodSteps()}, {"skipped_steps", s->skippedSteps()}};
}

void PipelineRuntime::restore(const run::Resume& r) {
  const auto& c = config_;
  bool savedWeights = false;
  for (const auto& s : r.manifest.slices) savedWeights = savedWeights || s.kind == checkpoint::Kind::kWeights;
  // Async runs continue with the saved stale weights when the checkpoint has the same staleness (checkpoints
  // from before optim.staleness: async = 1); sync runs, other staleness, or checkpoints without weights start
  // from weights = masters.
  const json& training = r.manifest.training;
  const std::int64_t savedStaleness = training.contains("optim_staleness") && training["optim_staleness"].is_number()
                                          ? training["optim_staleness"].get<std::int64_t>()
                                          : (training.value("optim_mode", std::string("sync")) == "async" ? 1 : 0);
  const bool withWeights = c.optim.async() && savedWeights && savedStaleness == c.optim.staleness;
  if (c.optim.async() && savedStaleness != c.optim.staleness && leader_) {
    RP_LOG_INFO("{}: saved with optim.staleness = {}, resumed with {}: the next iterations start from the masters",
                r.where(), savedStaleness, c.optim.staleness);
  }
  checkpoint::readSlices(
      r.dir, r.manifest,
      optimizer_->stateSlices(r.manifest.step, withWeights, OptimizerWorker::Purpose::kRestore, &r.manifest));
  optimizer_->restoreStagedWeights(r.dir, r.manifest);
  if (!withWeights) optimizer_->publishMasters();
  const json& t = r.manifest.training;
  try {
    optimizer_->restoreStepCount(t.at("optimizer").at("step_count").get<std::int64_t>());
    tokensSeen_ = t.at("tokens_seen").get<std::int64_t>();
    targetTokensSeen_ = t.at("target_tokens_seen").get<std::int64_t>();
    packer_ = std::make_unique<data::Packer>(corpus_, c.train.seqLen, static_cast<std::uint64_t>(c.train.seed),
                                             run::cursorFromJson(t.at("data_cursor"), r.where()));
    run::restoreRng(t.at("rng").at(0).at("torch_cpu").get<std::string>(), r.where());
    coordination_->resumeAt(t.value("dispatch_counter", std::int64_t{0}), r.manifest.step);
    if (optimizer_->scaler() != nullptr && !t.at("loss_scaler").is_null()) {
      const json& s = t.at("loss_scaler");
      optimizer_->restoreScaler(s.at("scale").get<double>(), s.at("good_steps").get<std::int64_t>(),
                                s.at("skipped_steps").get<std::int64_t>(), r.manifest.step);
    }
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: the training state is incomplete: {}", r.where(), e.what());
  }
  startStep_ = r.manifest.step;
  if (id_.localRank == 0) fences_->startAt(startStep_);
  channel_->barrier();  // the checkpoint is restored
}

torch::Tensor PipelineRuntime::storeWeight(const std::string& name) const {
  for (const auto& t : model_->tensors()) {
    if (t.name != name) continue;
    if (t.trainable && splitMasters()) {  // Note [Split master], with the tie bits finish() gathered
      const auto* weight = reinterpret_cast<const std::uint16_t*>(store_->bytes(weightRegion(name)));
      const auto* low = reinterpret_cast<const std::uint16_t*>(store_->bytes(masterRegion(name)));
      const auto found = finalTies_.find(static_cast<std::size_t>(&t - model_->tensors().data()));
      const std::set<std::uint64_t> none, &ties = found != finalTies_.end() ? found->second : none;
      torch::Tensor out = torch::empty(t.local.sizes(), torch::kFloat);
      float* data = out.data_ptr<float>();
      for (std::int64_t k = 0; k < out.numel(); ++k) {
        data[k] = optim::joinMaster(weight[k], low[k], ties.count(static_cast<std::uint64_t>(k)) != 0);
      }
      return out;
    }
    if (t.trainable) {
      const bool own = masters() == Masters::kOwn;
      return storeTensor(own ? masterRegion(name) : weightRegion(name), t.local.sizes(), torch::kFloat).clone();
    }
    const torch::Tensor stored = storeTensor(weightRegion(name), t.local.sizes(), t.local.scalar_type());
    if (const model::Nf4Packing* packing = model_->model().packing(name))
      return model::dequantizePacked(stored, *packing);
    return stored.to(torch::kFloat);
  }
  RP_THROW(InputError, "no tensor named '{}' in the pipeline model", name);
}

void PipelineRuntime::finish() {
  // Every rank's optimizer is done: publish the final masters (each rank its slices) for sampling and export.
  channel_->barrier();  // every optimizer is done
  optimizer_->publishMasters();
  if (splitMasters()) {               // storeWeight joins the split masters exactly with every rank's tie bits
    std::vector<std::uint64_t> ties;  // (tensor, element) pairs
    for (const auto& [tensor, element] : optimizer_->tieBits()) ties.insert(ties.end(), {tensor, element});
    for (const auto& bytes : channel_->gather(ties.data(), ties.size() * sizeof(std::uint64_t), 0)) {
      std::vector<std::uint64_t> theirs(bytes.size() / sizeof(std::uint64_t));
      std::memcpy(theirs.data(), bytes.data(), bytes.size());
      for (std::size_t k = 0; k + 1 < theirs.size(); k += 2) finalTies_[theirs[k]].insert(theirs[k + 1]);
    }
  }
  channel_->barrier();  // the final weights are published
  finishTrace();
  if (leader_) writeProfile();
}

}  // namespace rp::engine
