#include "engine/runtime.h"

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "control/channel.h"
#include "data/dataset.h"
#include "engine/costs.h"
#include "model/lora.h"
#include "optim/grad_clip.h"
#include "train/batch.h"
#include "train/sample.h"
#include "trace/progress.h"

namespace rp::engine {
namespace {

std::string weightRegion(const std::string& name) { return "w/" + name; }
std::string gradRegion(const std::string& name, int layer) { return fmt::format("g/{}@{}", name, layer); }
std::string actRegion(int layer, int mb) { return fmt::format("act/{}/{}", layer, mb); }
std::string gradActRegion(int layer, int mb) { return fmt::format("gact/{}/{}", layer, mb); }

// This rank's contiguous share [begin, end) of n elements split over `parts`.
std::pair<std::size_t, std::size_t> sliceOf(std::size_t n, int part, int parts) {
  const std::size_t p = static_cast<std::size_t>(parts), r = static_cast<std::size_t>(part);
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = base * r + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

// Note [Fault injection]: RP_FAULT_INJECT lets the failure tests kill or fail a real rank mid-run.
void injectFault(int rank, std::int64_t step) {
  const std::string spec = env::get(env::kFaultInject);
  if (spec.empty()) return;
  const auto a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || a == b) RP_THROW(InputError, "{}='{}': expected kill:<rank>:<step> or throw:<rank>:<step>", env::kFaultInject.name, spec);
  if (std::stoi(spec.substr(a + 1, b - a - 1)) != rank || std::stoll(spec.substr(b + 1)) != step) return;
  if (spec.substr(0, a) == "kill") {
    RP_LOG_WARN("fault injection: rank {} kills itself at step {}", rank, step);
    std::raise(SIGKILL);
  }
  RP_THROW(Error, "fault injection: rank {} fails at step {}", rank, step);
}

}  // namespace

// The rows of one step, as microbatches with their attention contexts (every rank builds the same).
struct PipelineRuntime::StepData {
  std::vector<model::Batch> batches;
  std::vector<model::AttentionContext> contexts;
  std::int64_t targets = 0;
  std::int64_t tokens = 0;
};

PipelineRuntime::PipelineRuntime(config::RunConfig config, const MpiSession& session)
    : config_(std::move(config)), session_(session), rank_(session.identity().rank), workers_(session.identity().size) {
  const auto& c = config_;
  const auto& id = session.identity();
  if (id.nodeCount > 1) {
    RP_THROW(InputError, "{} ranks on {} nodes: the pipeline runtime runs on one node for now (data parallelism "
             "across nodes is not implemented yet)", id.size, id.nodeCount);
  }
  if (c.model.dtype != "float32") {
    RP_THROW(InputError, "model.dtype = \"{}\": the pipeline runtime supports float32 for now (the single-process "
             "trainer, with one rank, supports bfloat16 and float16)", c.model.dtype);
  }
  if (c.optim.async) {
    RP_LOG_WARN("optim.mode = async is not implemented in the pipeline runtime yet; running sync");
  }
  const long threads = c.train.threads > 0 ? c.train.threads : env::getInt(env::kNumThreads);
  if (threads > 0) torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(static_cast<std::uint64_t>(c.train.seed));

  // Every rank holds a replica (its device memory on the CPU backend) and the same data stream.
  std::shared_ptr<model::CausalLM> model;
  if (c.model.randomInit) {
    model = std::make_shared<model::CausalLM>(model::loadModelConfig(c.model.path), torch::kFloat);
    model::initRandom(*model);
  } else {
    model = model::loadHfModel(c.model.path, torch::kFloat);
  }
  std::vector<model::NamedTensor> adapters;
  if (c.lora.rank > 0) adapters = model::attachLora(*model, {c.lora.rank, c.lora.alpha, c.lora.dropout, c.lora.targets});
  model_ = std::make_unique<PipelineModel>(model, adapters);
  tokenizer_ = std::make_unique<data::Tokenizer>(data::Tokenizer::fromFile(c.model.tokenizer));
  data::DatasetOptions d;
  d.paths = c.data.paths;
  d.format = c.data.format;
  d.sampleBy = c.data.sampleBy;
  d.chatTemplate = c.data.chatTemplate;
  d.addBos = c.data.addBos;
  d.addEos = c.data.addEos;
  d.skipBadRecords = c.data.skipBadRecords;
  d.bosId = static_cast<std::int32_t>(model->config().bosTokenId);
  d.eosId = static_cast<std::int32_t>(model->config().eosTokenId);
  corpus_ = data::loadDataset(d, *tokenizer_);
  packer_ = std::make_unique<data::Packer>(corpus_, c.train.seqLen, static_cast<std::uint64_t>(c.train.seed));
  rowsPerMicrobatch_ = c.train.globalBatch / c.train.microbatches;

  const int L = model_->layerCount();
  const LayerCosts costs = estimateCosts(*model_, c.train.seqLen * rowsPerMicrobatch_);
  if (c.pipeline.plan == "auto") {
    const auto result = schedule::partition(costs.layers, {workers_, 1.1, c.pipeline.memoryLimitGb * 1e9});
    plan_ = result.plan;
  } else {
    plan_ = schedule::parsePlan(c.pipeline.plan, L, "pipeline.plan");
  }
  schedule::validate(plan_, L, "pipeline.plan");
  if (rank_ == 0) {
    RP_LOG_INFO("pipeline: {} workers, {} microbatches of {} rows, plan {} ({} stages)", workers_, c.train.microbatches,
                rowsPerMicrobatch_, schedule::describe(plan_), plan_.stageCount());
    RP_LOG_INFO("pipeline: predicted stage costs (GFLOP per microbatch) {}", describeStageCosts(plan_, costs));
  }
  buildStore();
  schedule_ = optim::LrSchedule{optim::parseScheduleKind(c.optim.schedule, "optim.schedule"), c.optim.lr,
                                c.optim.warmupSteps, c.train.maxSteps, c.optim.minLrRatio};
}

PipelineRuntime::~PipelineRuntime() = default;

void PipelineRuntime::buildStore() {
  const auto& c = config_;
  memory::StoreLayout layout;
  for (const auto& t : model_->tensors()) {
    const std::size_t bytes = static_cast<std::size_t>(t.local.numel()) * sizeof(float);
    layout.add(weightRegion(t.name), bytes);
    if (t.trainable) {
      for (int l : t.layers) layout.add(gradRegion(t.name, l), bytes);
    }
  }
  const std::size_t actBytes = static_cast<std::size_t>(rowsPerMicrobatch_ * c.train.seqLen *
                                                        model_->model().config().hiddenSize) * sizeof(float);
  for (int l = 1; l < model_->layerCount(); ++l) {
    for (int mb = 0; mb < c.train.microbatches; ++mb) {
      layout.add(actRegion(l, mb), actBytes);
      layout.add(gradActRegion(l, mb), actBytes);
    }
  }
  layout.add("loss", static_cast<std::size_t>(c.train.microbatches) * sizeof(double));
  store_ = std::make_unique<memory::NodeStore>(std::move(layout), session_.node(), "store");
  RP_LOG_DEBUG("node store {}: {:.1f} MB", store_->segmentName(), static_cast<double>(store_->layout().total()) / 1e6);

  // Local rank 0 publishes the initial weights; every replica already holds the same values.
  if (session_.identity().localRank == 0) {
    torch::NoGradGuard noGrad;
    for (const auto& t : model_->tensors()) storeTensor(weightRegion(t.name), t.local.sizes()).copy_(t.local);
  }
  checkMpi(MPI_Barrier(session_.node()), "MPI_Barrier(store initialised)");

  adamw_ = std::make_unique<optim::AdamW>(optim::AdamWConfig{c.optim.lr, c.optim.beta1, c.optim.beta2, c.optim.eps,
                                                             c.optim.weightDecay, c.optim.amsgrad});
  const int localRank = session_.identity().localRank, localSize = session_.identity().localSize;
  for (const auto& t : model_->tensors()) {
    if (!t.trainable) continue;
    const auto [begin, end] = sliceOf(static_cast<std::size_t>(t.local.numel()), localRank, localSize);
    adamw_->add(t.name, store_->floats(weightRegion(t.name)) + begin,
                store_->floats(gradRegion(t.name, t.layers.front())) + begin, end - begin);
  }
}

torch::Tensor PipelineRuntime::storeTensor(const std::string& region, at::IntArrayRef shape) const {
  return torch::from_blob(store_->floats(region), shape, torch::kFloat);
}

torch::Tensor PipelineRuntime::storeWeight(const std::string& name) const {
  for (const auto& t : model_->tensors()) {
    if (t.name == name) return storeTensor(weightRegion(name), t.local.sizes()).clone();
  }
  RP_THROW(InputError, "no tensor named '{}' in the pipeline model", name);
}

// Upload: the store's weights of every tensor the layers use, into the replica.
void PipelineRuntime::upload(const schedule::Range& layers) {
  torch::NoGradGuard noGrad;
  for (int l = layers.begin; l < layers.end; ++l) {
    for (int i : model_->tensorsOfLayer(l)) {
      auto& t = model_->tensors()[static_cast<std::size_t>(i)];
      t.local.copy_(storeTensor(weightRegion(t.name), t.local.sizes()));
    }
  }
}

// Download: each trainable tensor's accumulated gradient into the slot of its first user in this job (a
// tensor used twice within one job has one gradient for both uses; the other slot gets zeros).
void PipelineRuntime::download(const schedule::Range& layers) {
  torch::NoGradGuard noGrad;
  std::vector<int> done;
  for (int l = layers.begin; l < layers.end; ++l) {
    for (int i : model_->tensorsOfLayer(l)) {
      const auto& t = model_->tensors()[static_cast<std::size_t>(i)];
      if (!t.trainable) continue;
      auto slot = storeTensor(gradRegion(t.name, l), t.local.sizes());
      const bool first = std::find(done.begin(), done.end(), i) == done.end();
      if (first && t.local.grad().defined()) {
        slot.copy_(t.local.grad());
      } else {
        slot.zero_();
      }
      done.push_back(i);
    }
  }
  for (int i : done) {
    auto local = model_->tensors()[static_cast<std::size_t>(i)].local;
    if (local.grad().defined()) local.mutable_grad().reset();
  }
}

void PipelineRuntime::runJob(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table,
                             const StepData& data) {
  const schedule::Job& job = table.jobs[static_cast<std::size_t>(k)];
  const int L = model_->layerCount();
  const auto H = model_->model().config().hiddenSize;
  const std::vector<std::int64_t> shape{rowsPerMicrobatch_, config_.train.seqLen, H};
  const bool hasPrev = k > 0, hasNext = k + 1 < static_cast<std::int64_t>(table.jobs.size());
  const int prevWorker = hasPrev ? table.jobs[static_cast<std::size_t>(k - 1)].worker : -1;
  const int nextWorker = hasNext ? table.jobs[static_cast<std::size_t>(k + 1)].worker : -1;
  // Backward-stage starts whose input a forward stage checkpoints to the arena.
  std::vector<bool> checkpoint(static_cast<std::size_t>(L), false);
  for (const auto& r : plan_.backward) checkpoint[static_cast<std::size_t>(r.begin)] = true;

  upload(job.layers);
  model_->model().train();
  const double norm = 1.0 / static_cast<double>(std::max<std::int64_t>(1, data.targets));
  for (int mb = 0; mb < config_.train.microbatches; ++mb) {
    if (hasPrev && prevWorker != rank_) {
      control::waitReady(session_.world(), prevWorker, {control::kProtocolVersion, static_cast<std::uint32_t>(mb), step, k - 1},
                         config_.pipeline.stallTimeoutSeconds);
    }
    const model::Batch& batch = data.batches[static_cast<std::size_t>(mb)];
    const model::AttentionContext& ctx = data.contexts[static_cast<std::size_t>(mb)];
    const int a = job.layers.begin, b = job.layers.end;
    switch (job.kind) {
      case schedule::JobKind::kForward: {
        torch::NoGradGuard noGrad;
        torch::Tensor x = a == 0 ? torch::Tensor() : storeTensor(actRegion(a, mb), shape);
        for (int l = a; l < b; ++l) {
          if (l > a && checkpoint[static_cast<std::size_t>(l)]) storeTensor(actRegion(l, mb), shape).copy_(x);
          x = model_->forward(l, x, batch, ctx);
        }
        storeTensor(actRegion(b, mb), shape).copy_(x);
        break;
      }
      case schedule::JobKind::kFused: {
        torch::Tensor input = a == 0 ? torch::Tensor()
                                     : storeTensor(actRegion(a, mb), shape).clone().requires_grad_(true);
        torch::Tensor x = input;
        for (int l = a; l < L - 1; ++l) x = model_->forward(l, x, batch, ctx);
        const model::LossSum loss = model_->loss(x, batch, config_.train.lossChunkTokens);
        (loss.sum * norm).backward();
        store_->doubles("loss")[mb] = loss.sum.item<double>();
        if (a > 0) storeTensor(gradActRegion(a, mb), shape).copy_(input.grad());
        break;
      }
      case schedule::JobKind::kBackward: {
        torch::Tensor input = a == 0 ? torch::Tensor()
                                     : storeTensor(actRegion(a, mb), shape).clone().requires_grad_(true);
        torch::Tensor x = input;
        for (int l = a; l < b; ++l) x = model_->forward(l, x, batch, ctx);  // recompute (stage grain)
        // A stage of frozen layers over the token ids (LoRA: the embedding) has nothing to differentiate.
        if (x.requires_grad()) x.backward(storeTensor(gradActRegion(b, mb), shape));
        if (a > 0) storeTensor(gradActRegion(a, mb), shape).copy_(input.grad());
        break;
      }
    }
    if (hasNext && nextWorker != rank_) {
      control::sendReady(session_.world(), nextWorker, {control::kProtocolVersion, static_cast<std::uint32_t>(mb), step, k});
    }
  }
  if (job.kind != schedule::JobKind::kForward) download(job.layers);
}

void PipelineRuntime::optimizerStep(std::int64_t step, trace::StepMetrics& m) {
  const int localRank = session_.identity().localRank, localSize = session_.identity().localSize;
  // Sum the per-use gradient slots of shared tensors into the first, on this rank's slice.
  std::vector<optim::GradBuffer> mine;
  for (const auto& t : model_->tensors()) {
    if (!t.trainable) continue;
    const auto [begin, end] = sliceOf(static_cast<std::size_t>(t.local.numel()), localRank, localSize);
    float* first = store_->floats(gradRegion(t.name, t.layers.front()));
    for (std::size_t u = 1; u < t.layers.size(); ++u) {
      const float* other = store_->floats(gradRegion(t.name, t.layers[u]));
      for (std::size_t i = begin; i < end; ++i) first[i] += other[i];
    }
    mine.push_back({first + begin, end - begin});
  }
  double sumSq = 0.0;
  for (const auto& g : mine) {
    for (std::size_t i = 0; i < g.n; ++i) sumSq += static_cast<double>(g.data[i]) * g.data[i];
  }
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, &sumSq, 1, MPI_DOUBLE, MPI_SUM, session_.node()), "MPI_Allreduce(grad norm)");
  m.gradNorm = std::sqrt(sumSq);
  if (config_.train.gradClip > 0) {
    const double coef = config_.train.gradClip / (m.gradNorm + 1e-6);
    if (coef < 1.0) {
      for (const auto& g : mine) {
        for (std::size_t i = 0; i < g.n; ++i) g.data[i] *= static_cast<float>(coef);
      }
    }
  }
  m.lr = schedule_.at(step);
  adamw_->step(m.lr);
}

trace::StepMetrics PipelineRuntime::step(std::int64_t step) {
  injectFault(rank_, step);
  const auto start = std::chrono::steady_clock::now();
  const auto& c = config_;
  StepData data;
  const auto rows = packer_->next(c.train.globalBatch);
  for (const auto& row : rows) {
    data.targets += row.targetCount();
    data.tokens += static_cast<std::int64_t>(row.inputIds.size());
  }
  for (std::int64_t mb = 0; mb < c.train.microbatches; ++mb) {
    const auto begin = static_cast<std::size_t>(mb * rowsPerMicrobatch_);
    data.batches.push_back(train::toBatch(rows, begin, begin + static_cast<std::size_t>(rowsPerMicrobatch_)));
    data.contexts.push_back(model_->model().rotary().context(data.batches.back(), torch::kFloat));
  }
  const schedule::DispatchTable table = schedule::dispatch(plan_, workers_, counter_);
  counter_ = table.counterEnd;
  for (std::size_t k = 0; k < table.jobs.size(); ++k) {
    if (table.jobs[k].worker == rank_) runJob(step, static_cast<std::int64_t>(k), table, data);
  }
  checkMpi(MPI_Barrier(session_.node()), "MPI_Barrier(gradients final)");
  trace::StepMetrics m;
  m.step = step + 1;
  m.tokens = data.tokens;
  m.targetTokens = data.targets;
  m.epoch = packer_->cursor().epoch;
  double lossSum = 0.0;
  for (int mb = 0; mb < c.train.microbatches; ++mb) lossSum += store_->doubles("loss")[mb];
  m.loss = lossSum / static_cast<double>(std::max<std::int64_t>(1, data.targets));
  optimizerStep(step, m);
  checkMpi(MPI_Barrier(session_.node()), "MPI_Barrier(weights updated)");
  m.stepTimeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.tokensPerSecond = static_cast<double>(m.tokens) / m.stepTimeSeconds;
  return m;
}

std::string PipelineRuntime::sample(const std::string& prompt) {
  upload({0, model_->layerCount()});
  return train::greedySample(model_->model(), *tokenizer_, prompt, config_.output.sampleTokens);
}

std::vector<trace::StepMetrics> PipelineRuntime::run() {
  const auto& c = config_;
  std::vector<trace::StepMetrics> all;
  std::unique_ptr<trace::MetricsWriter> metrics;
  std::unique_ptr<trace::Progress> progress;
  if (rank_ == 0) {
    std::filesystem::create_directories(c.output.dir);
    std::ofstream effective(std::filesystem::path(c.output.dir) / "config.effective.toml");
    for (const auto& line : c.values.describe()) effective << line << '\n';
    metrics = std::make_unique<trace::MetricsWriter>(c.output.dir);
    progress = std::make_unique<trace::Progress>(c.train.maxSteps, c.output.logEvery);
    if (!c.output.samplePrompt.empty()) std::printf("sample before: %s\n", sample(c.output.samplePrompt).c_str());
  }
  for (std::int64_t s = 0; s < c.train.maxSteps; ++s) {
    if (c.train.epochs > 0 && packer_->cursor().epoch >= c.train.epochs) break;
    const trace::StepMetrics m = step(s);
    if (rank_ != 0) continue;
    if (!std::isfinite(m.loss)) RP_THROW(Error, "step {}: loss is {} (diverged); lower optim.lr or check the data", m.step, m.loss);
    metrics->write(m);
    progress->update(m);
    all.push_back(m);
  }
  if (rank_ == 0) {
    progress.reset();
    RP_LOG_INFO("metrics written to {}", metrics->path());
    if (!c.output.samplePrompt.empty()) std::printf("sample after:  %s\n", sample(c.output.samplePrompt).c_str());
  }
  return all;
}

}  // namespace rp::engine
