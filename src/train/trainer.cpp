#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "common/env.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/parallel.h"
#include "common/resident_memory.h"
#include "model/batch.h"
#include "model/libtorch.h"
#include "model/lora.h"
#include "optim/adamw_simd.h"
#include "optim/grad_clip.h"
#include "run/checkpointing.h"
#include "run/evaluation.h"
#include "run/sampling.h"
#include "run/setup.h"
#include "run/utilisation.h"

namespace rp::train {
namespace {

// Note [Host memory] for one process: the whole model and, per trainable parameter, its gradient (model dtype),
// float32 master (bf16/fp16 runs), AdamW gradient slot and moments, sized on a placeholder model from
// config.json before any weight is allocated or loaded (docs/training.md, "Host memory").
void checkHostMemory(const config::RunConfig& c, torch::ScalarType dtype) {
  model::CausalLM placeholder(run::loadModelConfigFor(c), run::paramOptionsFor(c, dtype, /*allocate=*/false));
  double params = 0.0, trainable = 0.0, weights = 0.0, moments = 0.0;  // a packed NF4 weight: its parameters, bytes
  const auto bits = static_cast<int>(c.optim.stateBits);
  for (const auto& [name, p] : placeholder.hfParameters()) {
    const model::Nf4Packing* packing = placeholder.packing(name);
    params += static_cast<double>(packing ? packing->numel() : p.numel());
    weights += static_cast<double>(p.nbytes());
    if (c.lora.rank == 0)
      moments += optim::momentBytes(name, static_cast<std::size_t>(p.numel()), bits, c.optim.amsgrad);
  }
  if (c.lora.rank > 0) {
    for (const auto& [name, p] : model::attachLora(placeholder, run::loraConfigFor(c))) {
      params += static_cast<double>(p.numel());
      trainable += static_cast<double>(p.numel());
      weights += static_cast<double>(p.nbytes());
      moments += optim::momentBytes(name, static_cast<std::size_t>(p.numel()), bits, c.optim.amsgrad);
    }
  } else {
    trainable = params;
  }
  const double element = static_cast<double>(c10::elementSize(dtype));
  const double perTrainable = element + (dtype == torch::kFloat ? 0.0 : 4.0) + 4.0;
  const double state = trainable * perTrainable + moments;
  const HostMemory host = availableHostMemory();
  if (host.availableBytes == 0 || weights + state <= static_cast<double>(host.availableBytes)) return;
  RP_THROW(InputError,
           "{}: this run needs {:.2f} GB of host memory — the weights {:.2f} GB ({:.0f}M parameters in {}) and, for "
           "{:.0f}M trainable parameters, their gradients, float32 masters and optimizer state {:.2f} GB — but {} "
           "leaves {:.2f} GB: {}run the pipeline runtime over more nodes, or use a machine with more memory "
           "(docs/training.md, \"Host memory\")",
           c.model.path, (weights + state) / 1e9, weights / 1e9, params / 1e6, config::dtypeName(c.model.dtype),
           trainable / 1e6, state / 1e9, host.source, static_cast<double>(host.availableBytes) / 1e9,
           run::smallerModelHint(c));
}

}  // namespace

Trainer::Trainer(config::RunConfig config) : config_(std::move(config)), dtype_(run::torchDtype(config_.model.dtype)) {
  const auto& c = config_;
  const long threads = c.train.threads > 0 ? c.train.threads : env::getInt(env::kNumThreads);
  if (threads > 0) torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(static_cast<std::uint64_t>(c.train.seed));

  run::refuseForeignCheckpoints(c);  // before anything is loaded or written: a refused run changes nothing
  checkHostMemory(c, dtype_);
  tokenizer_ = run::loadTokenizerFor(c, run::loadModelConfigFor(c));  // refuses before the weights load
  model_ = run::loadModelFor(c, dtype_);

  if (c.lora.rank > 0) {
    trainable_ = model::attachLora(*model_, run::loraConfigFor(c));
  } else {
    trainable_ = model_->hfParameters();
  }
  adamw_ = std::make_unique<optim::AdamW>(run::adamwConfigFor(c), optim::bestAdamWKernel(), optim::bestAdamW8Kernel());
  optimThreads_ = parallel::optimizerThreads(static_cast<int>(c.optim.threads), 1);
  adamw_->setThreads(optimThreads_);
  // bf16/fp16: the kernel writes the rounded model copy (the parameter itself) in the same pass.
  const optim::ModelCopy copy = run::modelCopyFor(dtype_);
  std::int64_t count = 0;
  for (auto& [name, param] : trainable_) {
    param.set_requires_grad(true);
    masters_.push_back(dtype_ == torch::kFloat ? param.detach() : param.detach().to(torch::kFloat).contiguous());
    slots_.push_back(torch::zeros(param.sizes(), torch::kFloat));
    RP_CHECK(param.is_contiguous(), "parameter {} is not contiguous", name);
    adamw_->add(name, masters_.back().data_ptr<float>(), slots_.back().data_ptr<float>(),
                static_cast<std::size_t>(param.numel()),
                copy == optim::ModelCopy::kNone ? nullptr : static_cast<std::uint16_t*>(param.data_ptr()), copy);
    count += param.numel();
  }
  RP_LOG_INFO("{} trainable parameters in {} tensors ({})", count, trainable_.size(),
              c.lora.rank > 0 ? fmt::format("LoRA rank {}", c.lora.rank) : std::string("full fine-tune"));
  std::vector<std::pair<std::string, std::size_t>> sizes;
  for (const auto& [name, param] : trainable_) sizes.emplace_back(name, static_cast<std::size_t>(param.numel()));
  run::logEightBitLine(c, sizes);

  schedule_ = optim::LrSchedule{optim::parseScheduleKind(c.optim.schedule, "optim.schedule"), c.optim.lr,
                                c.optim.warmupSteps, c.train.maxSteps, c.optim.minLrRatio};
  if (dtype_ == torch::kHalf) {
    scaler_ = std::make_unique<optim::LossScaler>(run::lossScalerFor(c));
  }

  run::logStartWarnings(c, model_->config(), /*computesOnCpu=*/true);
  run::Corpora corpora = run::loadCorporaFor(c, model_->config(), *tokenizer_);
  corpus_ = std::move(corpora.train);
  evalRows_ = run::evalRows(c, corpora.eval);
  identity_ = run::runIdentity(c, corpus_);
  packer_ = std::make_unique<data::Packer>(corpus_, c.train.seqLen, static_cast<std::uint64_t>(c.train.seed));
  if (c.optim.async()) {
    RP_LOG_INFO(
        "optim.mode = async: one worker has nothing to overlap the optimizer with, so this trainer "
        "steps synchronously; asynchrony applies with the pipeline runtime");
  }
  if (const auto resume = run::openResume(c, identity_)) restore(*resume);
}

GradientResult Trainer::computeGradients(const std::vector<data::PackedRow>& rows, std::int64_t microbatches,
                                         double lossScale) {
  RP_CHECK(microbatches >= 1 && rows.size() % static_cast<std::size_t>(microbatches) == 0,
           "{} rows do not split into {} microbatches", rows.size(), microbatches);
  GradientResult result;
  for (const auto& row : rows) {
    result.targetTokens += row.targetCount();
    result.tokens += static_cast<std::int64_t>(row.inputIds.size());
  }
  // Every microbatch's summed loss is divided by the step's target count, so the accumulated gradient is
  // that of the mean over all the step's tokens, whatever the microbatch split (docs/training.md).
  const double norm = lossScale / static_cast<double>(std::max<std::int64_t>(1, result.targetTokens));
  const std::size_t per = rows.size() / static_cast<std::size_t>(microbatches);
  model_->train();
  for (std::size_t begin = 0; begin < rows.size(); begin += per) {
    const model::Batch batch = model::toBatch(rows, begin, begin + per);
    const model::LossSum loss = model_->loss(batch, config_.train.lossChunkTokens);
    if (loss.aux.defined()) {
      // The load-balancing loss of each forward, averaged over the microbatches (docs/moe.md).
      const double perMicrobatch = 1.0 / static_cast<double>(microbatches);
      (loss.sum * norm + loss.aux * (lossScale * perMicrobatch)).backward();
      result.auxLoss += loss.aux.item<double>() * perMicrobatch;
    } else {
      (loss.sum * norm).backward();
    }
    result.lossSum += loss.sum.item<double>();
  }
  torch::NoGradGuard noGrad;
  for (std::size_t i = 0; i < trainable_.size(); ++i) {
    auto& param = trainable_[i].second;
    if (param.grad().defined()) {
      slots_[i].copy_(param.grad());
      param.mutable_grad().reset();
    } else {
      slots_[i].zero_();
    }
  }
  return result;
}

trace::StepMetrics Trainer::applyStep(std::int64_t step, const GradientResult& grads) {
  trace::StepMetrics m;
  m.step = step + 1;
  m.loss = grads.lossSum / static_cast<double>(std::max<std::int64_t>(1, grads.targetTokens)) + grads.auxLoss;
  m.tokens = grads.tokens;
  m.targetTokens = grads.targetTokens;
  m.lr = schedule_.at(step);
  m.epoch = packer_->cursor().epoch;
  std::vector<optim::GradBuffer> buffers;
  for (auto& slot : slots_) buffers.push_back({slot.data_ptr<float>(), static_cast<std::size_t>(slot.numel())});
  if (scaler_) {
    m.lossScale = scaler_->scale();
    bool finite = true;
    for (auto& slot : slots_) {
      slot.div_(scaler_->scale());
      finite = finite && torch::isfinite(slot).all().item<bool>();
    }
    if (!scaler_->update(!finite)) {
      m.skipped = true;
      m.gradNorm = std::nan("");
      return m;
    }
  }
  m.gradNorm = optim::globalGradNorm(buffers, optimThreads_);
  if (!std::isfinite(m.gradNorm) || !std::isfinite(m.loss)) {
    m.skipped = true;  // a diverged step: no update (run::runLoop warns and counts)
    return m;
  }
  // Clipped as it is read, and the bf16/fp16 parameters written from the masters in the same pass.
  adamw_->step(m.lr, optim::clipCoefficient(m.gradNorm, config_.train.gradClip));
  return m;
}

std::string Trainer::sample(const std::string& prompt) {
  return run::sample(*model_, *tokenizer_, config_, prompt);
}

std::optional<run::EvalResult> Trainer::evaluate(std::int64_t) {
  if (evalRows_.empty()) return std::nullopt;
  const auto& c = config_;
  return run::evaluate(*model_, evalRows_, c.train.globalBatch / c.train.microbatches, c.train.lossChunkTokens);
}

double Trainer::modelFlopsPerStep() const {
  return run::modelFlopsPerStep(config_, model_->config());
}

double Trainer::peakFlops() const {
  return run::peakFlops(config_, "", 1);  // the single-process trainer runs on the CPU
}

bool Trainer::step(std::int64_t step, int signal) {
  if (signal != 0) {
    stopSignal_ = signal;
    return false;
  }
  const auto& c = config_;
  const auto start = std::chrono::steady_clock::now();
  const auto rows = packer_->next(c.train.globalBatch);
  GradientResult grads = computeGradients(rows, c.train.microbatches, scaler_ ? scaler_->scale() : 1.0);
  if (fault::maybeInject(0, step, "loss")) {  // as if the step diverged: a NaN loss and NaN gradients
    grads.lossSum = std::numeric_limits<double>::quiet_NaN();
    for (auto& slot : slots_) slot.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  trace::StepMetrics m = applyStep(step, grads);
  m.stepTimeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.tokensPerSecond = static_cast<double>(m.tokens) / m.stepTimeSeconds;
  tokensSeen_ += m.tokens;
  targetTokensSeen_ += m.targetTokens;
  finished_.push_back(m);
  return true;
}

std::vector<trace::StepMetrics> Trainer::finished() {
  return std::exchange(finished_, {});
}

bool Trainer::run() {
  return run::runLoop(config_, *this).outcome == run::Outcome::kCompleted;
}

}  // namespace rp::train
