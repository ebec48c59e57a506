#include "engine/runtime.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/env.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/host_cpu.h"
#include "common/log.h"
#include "common/parallel.h"
#include "control/channel.h"
#include "engine/costs.h"
#include "engine/emulation.h"
#include "engine/regions.h"
#include "model/batch.h"
#include "model/libtorch.h"
#include "model/lora.h"
#include "run/checkpointing.h"
#include "run/evaluation.h"
#include "run/sampling.h"
#include "run/setup.h"
#include "schedule/plan_search.h"
#include "schedule/projection.h"
#include "trace/formats.h"

namespace rp::engine {

using namespace detail;

namespace {

// The layer times the first plan is made from: the FLOP proxy's, or those of `profilePath` (pipeline.profile:
// an earlier run's profile.json, or a hand-made one); the bytes are the proxy's either way. An emulated device's
// profile holds its model's times: a run on a real device takes them only when told (pipeline.profile_modelled).
schedule::LayerCosts startingCosts(schedule::LayerCosts proxy, const config::RunConfig& c, const std::string& device) {
  const std::string& profilePath = c.pipeline.profile;
  if (profilePath.empty()) return proxy;
  const trace::LayerProfileFile p = trace::readLayerProfile(profilePath);
  if (p.modelled() && !trace::modelledDevice(device) && !c.pipeline.profileModelled) {
    RP_THROW(InputError,
             "{}: pipeline.profile = \"{}\" holds the layer times of an emulated device ({}): its model's, not "
             "measurements, and this run computes on {}; set pipeline.profile_modelled = true to start from them "
             "anyway",
             c.values.source({"pipeline.profile"}), profilePath, p.device, device);
  }
  if (p.forwardMs.size() != proxy.forward.size()) {
    RP_THROW(InputError,
             "{}: pipeline.profile has times for {} layers; this model has {} (embedding and head included)",
             profilePath, p.forwardMs.size(), proxy.forward.size());
  }
  proxy.forward = p.forwardMs;
  proxy.backward = p.backwardMs;
  RP_LOG_DEBUG("pipeline: the first plan uses the layer times of {}", profilePath);
  return proxy;
}

}  // namespace

PipelineRuntime::PipelineRuntime(config::RunConfig config, RuntimeParts parts)
    : config_(std::move(config)),
      id_(parts.identity),
      rank_(parts.identity.localRank),
      worldRank_(parts.identity.rank),
      leader_(parts.identity.rank == 0),
      workers_(parts.identity.localSize),
      nodeMemory_(std::move(parts.nodeMemory)),
      tensorFactory_(std::move(parts.tensors)),
      channel_(std::move(parts.node)),
      worldChannel_(std::move(parts.world)) {
  const auto started = std::chrono::steady_clock::now();
  const auto& c = config_;
  const auto& id = id_;
  // Every collective waits at most pipeline.stall_timeout_s, the cross-node ones (split off the world channel)
  // included: a cut link or a hung rank ends the job naming who did not join (docs/protocol.md).
  const auto place = [places = id.places](int r) {
    const RankPlace& p = places.at(static_cast<std::size_t>(r));
    return fmt::format("rank {} on node {} ({})", r, p.node, p.host);
  };
  worldChannel_->boundCollectives(stallPolicy(), place);
  channel_->boundCollectives(stallPolicy(), place);
  // Across nodes: data parallel. Every node runs the same pipeline over its share of the global batch.
  config::checkPipelineRun(c, id.nodeCount);
  if (leader_) run::refuseForeignCheckpoints(c);  // before anything is loaded or written (ends the job: exit 2)
  std::int32_t localSize = id.localSize;
  worldChannel_->allreduce(&localSize, 1, control::Reduce::kMin);
  if (localSize != id.localSize) {
    RP_THROW(InputError,
             "rank {} is on a node with {} ranks but another node has {}: every node needs the same number "
             "of workers",
             id.rank, id.localSize, localSize);
  }
  const long threads = c.train.threads > 0 ? c.train.threads : env::getInt(env::kNumThreads);
  if (threads > 0) torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(static_cast<std::uint64_t>(c.train.seed));

  // No rank holds a replica: the model's tensors are placeholders until a job binds its stage to a slot of
  // the worker (Note [Stage slots]); local rank 0 writes the initial weights straight into the node store.
  // Every rank reads the same data stream.
  model::ParamOptions placeholders = run::paramOptionsFor(c, run::torchDtype(c.model.dtype), /*allocate=*/false);
  auto pipelineModel = [&] {
    auto model = std::make_shared<model::CausalLM>(run::loadModelConfigFor(c, id.nodeCount), placeholders);
    std::vector<model::NamedTensor> adapters;
    if (c.lora.rank > 0) adapters = model::attachLora(*model, run::loraConfigFor(c));
    return std::make_unique<PipelineModel>(model, adapters);
  };
  model_ = pipelineModel();
  auto& model = model_->model();
  // The emulated device's jobs compute on meta tensors (Note [Emulated device]), which only meta placeholders
  // take: a twin of the model, its tensors in the same order, while the host's work (the initial weights,
  // samples, evaluation) binds the model to host memory as always.
  if (c.pipeline.backend == device::BackendChoice::kEmulated) {
    placeholders.placeholderDevice = torch::kMeta;
    deviceModel_ = pipelineModel();
  }
  tokenizer_ = run::loadTokenizerFor(c, model.config());
  run::Corpora corpora = run::loadCorporaFor(c, model.config(), *tokenizer_);
  corpus_ = std::move(corpora.train);
  evalRows_ = run::evalRows(c, corpora.eval);
  identity_ = run::runIdentity(c, corpus_);
  packer_ = std::make_unique<data::Packer>(corpus_, c.train.seqLen, static_cast<std::uint64_t>(c.train.seed));
  rowsPerMicrobatch_ = c.train.globalBatch / id.nodeCount / c.train.microbatches;
  versions_ = static_cast<int>(std::max<std::int64_t>(1, c.optim.staleness));
  uploadsAfter_.assign(static_cast<std::size_t>(versions_),
                       std::vector<std::int64_t>(static_cast<std::size_t>(model_->layerCount()), 0));

  const int L = model_->layerCount();
  placeWorker();
  const auto wanted = static_cast<int>(c.pipeline.recomputeAhead);
  proxyCosts_ = estimateCosts(*model_, c.train.seqLen, rowsPerMicrobatch_, wanted, memoryBudget_);
  if (leader_) reportRecomputeDepth(proxyCosts_, wanted, memoryBudget_, c.train.seqLen * rowsPerMicrobatch_);
  const LayerCosts& costs = proxyCosts_;
  const schedule::LayerCosts planCosts = startingCosts(costs.layers, c, deviceLabel_);
  const bool roundRobin = c.pipeline.schedule == config::PipelineSchedule::kRoundPipe;
  if (!roundRobin) {
    // Weights bound to workers: stage s on worker s, a contiguous partition balanced by the same costs.
    plan_ = schedule::balancedBoundPlan(planCosts, workers_);
  } else if (c.pipeline.plan == "auto") {
    plan_ =
        schedule::choosePlan(c.pipeline.planner, planCosts,
                             {workers_, static_cast<int>(c.train.microbatches), memoryBudget_, costs.recomputeAhead});
  } else {
    plan_ = schedule::parsePlan(c.pipeline.plan, L, "pipeline.plan");
  }
  schedule::validate(plan_, L, "pipeline.plan");
  if (leader_) {
    RP_LOG_INFO(
        "pipeline: {} node(s) x schedule {}, {} workers, {} microbatches of {} rows, optimizer {}, plan {} ({} stages)",
        id.nodeCount, config::scheduleName(c.pipeline.schedule), workers_, c.train.microbatches, rowsPerMicrobatch_,
        fmt::format("{} on {} thread(s) per rank",
                    c.optim.async()
                        ? fmt::format("async ({} step{} stale)", c.optim.staleness, c.optim.staleness > 1 ? "s" : "")
                        : "sync",
                    parallel::optimizerThreads(static_cast<int>(c.optim.threads), id.localSize)),
        schedule::describe(plan_), plan_.stageCount());
    RP_LOG_INFO("pipeline: predicted stage costs (GFLOP per microbatch) {}", describeStageCosts(plan_, costs));
    if (roundRobin && plan_.stageCount() < workers_) {
      RP_LOG_WARN(
          "pipeline: {} workers per node but the plan has {} stages: each iteration leaves {} worker(s) idle; "
          "run fewer ranks per node (this model's {} layers, embedding and head included, split into at most "
          "{} stages: pipeline.plan)",
          workers_, plan_.stageCount(), workers_ - plan_.stageCount(), L, 2 * L - 1);
    }
  }
  coordinator::CoordinationOptions co;
  co.workers = workers_;
  co.nodes = id.nodeCount;
  co.roundRobin = roundRobin;
  co.replanEvery = c.pipeline.plan == "auto" ? c.pipeline.replanEvery : 0;
  co.memoryLimitBytes = memoryBudget_;
  co.stall = stallPolicy();
  co.planner = c.pipeline.planner;
  co.microbatches = static_cast<int>(c.train.microbatches);
  co.recomputeAhead = costs.recomputeAhead;
  co.dispatch = c.pipeline.dispatch;
  for (const auto& place : id.places) co.workerOfRank.push_back(place.localRank);
  coordination_ = std::make_unique<coordinator::Coordination>(*worldChannel_, co, plan_, planCosts);
  auto slots = std::make_unique<StageSlots>(*worker_, memoryBudget_, c.pipeline.memoryLimitGb > 0);
  if (leader_) {
    run::logStartWarnings(c, model_->model().config(), worker_->placement().backend == device::Backend::kCpu);
    std::vector<std::pair<std::string, std::size_t>> trainable;
    for (const auto& t : model_->tensors()) {
      if (t.trainable) trainable.emplace_back(t.name, static_cast<std::size_t>(t.local.numel()));
    }
    run::logEightBitLine(c, trainable);
  }
  if (env::getInt(env::kBenchNoUploads) != 0 && leader_) {
    RP_LOG_WARN(
        "RP_BENCH_NO_UPLOADS=1: weights are not uploaded (a benchmark of the compute alone); the losses are "
        "meaningless");
  }
  slots->fit(jobModel(), plan_);
  if (id.nodeCount > 1) {
    // Ranks with the same local rank hold the same slices: they sum their nodes' gradients.
    crossNode_ = worldChannel_->split(id.localRank, id.node);
  }
  if (c.optim.shardAcrossNodes && leader_) {
    RP_LOG_INFO("{}", shardedAcrossNodes()
                          ? fmt::format("optimizer state sharded across {} nodes: each keeps 1/{} of the AdamW moments",
                                        id.nodeCount, id.nodeCount)
                          : std::string("optim.shard_across_nodes: one node, nothing to shard"));
  }
  std::unique_ptr<transport::TensorChannel> tensors = buildStore();
  jobs_ = std::make_unique<JobExecutor>(
      JobContext{config_, jobModel(), *store_, *fences_, *activity_, timeline_.get(), *worker_, proxyCosts_, rank_,
                 worldRank_, id.nodeCount, versions_, rowsPerMicrobatch_},
      std::move(slots), std::move(tensors));
  jobs_->setPlan(plan_);
  if (const auto resume = run::openResume(c, identity_)) restore(*resume);
  if (leader_) {
    RP_LOG_INFO("pipeline: set up in {:.1f} s (node store {:.2f} GB{}, rank 0's optimizer state {:.2f} GB)",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                static_cast<double>(store_->layout().total()) / 1e9, storePinned_,
                static_cast<double>(optimizer_->stateBytes()) / 1e9);
  }
}

PipelineRuntime::~PipelineRuntime() {
  jobs_.reset();       // waits for its prefetch: never free memory the copy thread still writes
  optimizer_.reset();  // joins the thread that uses the store and its channels
}

std::size_t PipelineRuntime::tensorBytes() const {
  std::size_t elements = 1;
  for (std::int64_t d : JobExecutor::activationShape(config_, *model_, rowsPerMicrobatch_)) {
    elements *= static_cast<std::size_t>(d);
  }
  return elements * c10::elementSize(model_->dtype());
}

std::unique_ptr<transport::TensorChannel> PipelineRuntime::buildStore() {
  const auto& c = config_;
  const int L = model_->layerCount();
  const auto& id = id_;
  // One time origin for the node (the monotonic clock is shared by its processes).
  std::int64_t origin = trace::Timeline::Clock::now().time_since_epoch().count();
  channel_->broadcast(&origin, sizeof(origin), 0);
  timeline_ = std::make_unique<trace::Timeline>(
      worldRank_, trace::Timeline::Clock::time_point(trace::Timeline::Clock::duration(origin)));
  if (worker_->modelsCompute()) timeline_->setDeviceLabel(deviceLabel_);  // the emulated device's track
  memory::StoreLayout layout;
  // Weights and gradient slots in the model dtype (trainable ones in `versions_` versions); masters in float32,
  // split (their low words: the weights hold the rest; Note [Split master]) or none (the float32 weights are them).
  const Masters masters = this->masters();
  const std::size_t masterBytes = masters == Masters::kSplit ? sizeof(std::uint16_t) : sizeof(float);
  for (int i = 0; i < static_cast<int>(model_->tensors().size()); ++i) {
    const auto& t = model_->tensors()[static_cast<std::size_t>(i)];
    layout.add(weightRegion(t.name), model_->bytes(i));
    if (t.trainable) {
      if (masters != Masters::kWeights) {
        layout.add(masterRegion(t.name), static_cast<std::size_t>(t.local.numel()) * masterBytes);
      }
      for (int v = 0; v < versions_; ++v) {
        if (v > 0) layout.add(weightRegion(t.name, v), model_->bytes(i));
        for (int l : t.layers) layout.add(gradRegion(t.name, l, v), model_->bytes(i));
      }
    }
  }
  for (int b = 0; b <= versions_; ++b) {
    layout.add(lossRegion(b, versions_ + 1), static_cast<std::size_t>(c.train.microbatches) * sizeof(double));
  }
  const model::MoeConfig& moe = model_->model().config().moe;
  if (moe.auxLoss()) {  // Note [Router statistics]
    for (int b = 0; b <= versions_; ++b) {
      layout.add(routerRegion(b, versions_ + 1),
                 RouterBoard::regionBytes(static_cast<int>(c.train.microbatches), L, static_cast<int>(moe.numExperts)));
    }
  }
  if (moe.numExperts > 0) {  // Note [Routing tape]
    for (int b = 0; b <= versions_; ++b) {
      layout.add(
          routingRegion(b, versions_ + 1),
          RoutingTape::regionBytes(static_cast<int>(c.train.microbatches), L, rowsPerMicrobatch_ * c.train.seqLen,
                                   static_cast<int>(moe.expertsPerToken), static_cast<int>(moe.numExperts)));
    }
  }
  layout.add("fences", Fences::regionBytes(L, id.localSize, versions_));
  layout.add("activity", ActivityBoard::regionBytes(id.localSize));
  checkHostMemory(static_cast<double>(layout.total()));
  std::shared_ptr<memory::NodeMemory> memory = nodeMemory_(layout.total(), *channel_, "store");
  {  // Note [Parallel first touch]: each of the node's ranks zeroes its share, before anyone writes the store
    const auto [begin, end] = parallel::partOf(layout.total(), id.localRank, id.localSize, 4096);
    parallel::fillZero(memory->data() + begin, end - begin,
                       parallel::optimizerThreads(static_cast<int>(c.optim.threads), id.localSize));
    channel_->barrier();
  }
  const auto pinning = std::chrono::steady_clock::now();
  storePin_ = worker_->pinHost(memory->data(), layout.total(), "node store");  // direct copies (cuda)
  if (worker_->placement().backend == device::Backend::kCuda) {                // the set-up line says whether it held
    storePinned_ = storePin_
                       ? fmt::format(", pinned in {:.1f} s",
                                     std::chrono::duration<double>(std::chrono::steady_clock::now() - pinning).count())
                       : std::string(", not pinned: uploads are staged by the driver");
  }
  store_ = std::make_unique<memory::NodeStore>(std::move(layout), std::move(memory));
  RP_LOG_DEBUG("node store ({}): {:.1f} MB", store_->describe(), static_cast<double>(store_->layout().total()) / 1e6);
  std::unique_ptr<transport::TensorChannel> tensors = tensorFactory_(
      {*channel_, *worker_, nodeMemory_, stallPolicy(), L, static_cast<int>(c.train.microbatches), tensorBytes()});
  activity_ = std::make_unique<ActivityBoard>(store_->bytes("activity"), id.localSize);
  heartbeat_ = std::make_unique<Heartbeat>(*activity_, id.localRank);
  fences_ =
      std::make_unique<Fences>(store_->bytes("fences"), L, id.localSize, stallPolicy(), activity_.get(), versions_);

  if (id.localRank == 0) publishInitialWeights();
  channel_->barrier();  // the store is initialised

  std::vector<OptimTensor> optimTensors;
  for (const auto& t : model_->tensors()) {
    OptimTensor o{t.name,
                  t.layers,
                  {store_->bytes(weightRegion(t.name))},
                  nullptr,
                  {},
                  static_cast<std::size_t>(t.local.numel()),
                  t.trainable,
                  t.local.sizes().vec()};
    if (t.trainable) {
      if (masters == Masters::kSplit) {
        o.masterLow = reinterpret_cast<std::uint16_t*>(store_->bytes(masterRegion(t.name)));
      } else {
        o.master = store_->floats(masters == Masters::kWeights ? weightRegion(t.name) : masterRegion(t.name));
      }
      for (int v = 0; v < versions_; ++v) {
        if (v > 0) o.weights.push_back(store_->bytes(weightRegion(t.name, v)));
        o.slots.emplace_back();
        for (int l : t.layers) o.slots.back().push_back(store_->bytes(gradRegion(t.name, l, v)));
      }
    }
    optimTensors.push_back(std::move(o));
  }
  OptimizerOptions options;
  options.adamw = run::adamwConfigFor(c);
  options.schedule = optim::LrSchedule{optim::parseScheduleKind(c.optim.schedule, "optim.schedule"), c.optim.lr,
                                       c.optim.warmupSteps, c.train.maxSteps, c.optim.minLrRatio};
  options.gradClip = c.train.gradClip;
  options.threads = static_cast<int>(c.optim.threads);
  options.staleness = static_cast<int>(c.optim.staleness);
  options.dtype = model_->dtype();
  if (model_->dtype() == torch::kHalf) {
    options.lossScaling = run::lossScalerFor(c);
  }
  options.layers = L;
  for (int b = 0; b <= versions_; ++b) options.losses.push_back(store_->doubles(lossRegion(b, versions_ + 1)));
  options.microbatches = static_cast<int>(c.train.microbatches);
  options.timeline = timeline_.get();
  options.activity = activity_.get();
  options.crossNode = crossNode_.get();
  options.shardAcrossNodes = shardedAcrossNodes();
  options.splitMaster = splitMasters();
  optimizer_ = std::make_unique<OptimizerWorker>(std::move(optimTensors), *fences_, std::move(options), *channel_);
  return tensors;
}

// Local rank 0 writes the initial weights straight into the store — the model's tensors bound to their
// regions, drawing random numbers (model.init = random, LoRA) in the single-process trainer's order — then
// the float32 masters and the other versions of the trainable weights (the first k iterations all read W_0).
// Split masters start as the weights, bfloat16 values: low words and tie bits zero, as the store is; masters that
// are the weights are there already.
void PipelineRuntime::publishInitialWeights() {
  torch::NoGradGuard noGrad;
  bindToStore();
  run::initModelFor(config_, model_->model());
  if (config_.lora.rank > 0) model::resetLora(model_->model(), run::loraConfigFor(config_));
  for (const auto& t : model_->tensors()) {
    if (!t.trainable || masters() != Masters::kOwn) continue;
    storeTensor(masterRegion(t.name), t.local.sizes(), torch::kFloat).copy_(t.local);
    for (int v = 1; v < versions_; ++v)
      storeTensor(weightRegion(t.name, v), t.local.sizes(), t.local.scalar_type()).copy_(t.local);
  }
  model_->unbindAll();
}

void PipelineRuntime::bindToStore() {
  for (int i = 0; i < static_cast<int>(model_->tensors().size()); ++i) {
    model_->bind(i, store_->bytes(weightRegion(model_->tensors()[static_cast<std::size_t>(i)].name)));
  }
}

torch::Tensor PipelineRuntime::storeTensor(const std::string& region, at::IntArrayRef shape,
                                           torch::ScalarType dtype) const {
  return torch::from_blob(store_->bytes(region), shape, dtype);
}

void PipelineRuntime::runStep(std::int64_t step, const coordinator::Directive& directive) {
  activity_->set(rank_, 0, fmt::format("starting step {}", step + 1));
  fault::maybeInject(worldRank_, step);
  const device::CountHostWaits waits;  // this thread's blocking waits in the step
  const auto& c = config_;
  StepData data;
  const auto allRows = packer_->next(c.train.globalBatch);
  // The loss is the mean over the whole global batch; this node computes its share of the rows.
  for (const auto& row : allRows) {
    data.targets += row.targetCount();
    data.tokens += static_cast<std::int64_t>(row.inputIds.size());
  }
  const auto rows = data::shardRows(allRows, id_.node, id_.nodeCount);
  stepSizes_.push_back({data.tokens, data.targets, packer_->cursor().epoch});
  tokensSeen_ += data.tokens;
  targetTokensSeen_ += data.targets;
  {
    const auto onWorker = worker_->enterCompute();  // the batches' copies in order with the jobs' compute
    for (std::int64_t mb = 0; mb < c.train.microbatches; ++mb) {
      const auto begin = static_cast<std::size_t>(mb * rowsPerMicrobatch_);
      const model::Batch batch = model::toBatch(rows, begin, begin + static_cast<std::size_t>(rowsPerMicrobatch_));
      const model::AttentionContext ctx = model_->model().rotary().context(batch, model_->dtype());
      data.batches.push_back(model::toDevice(batch, device_));
      data.contexts.push_back(model::toDevice(ctx, device_));
    }
  }
  if (directive.planChanged) {
    plan_ = directive.plan;
    ++planChanges_;
    jobs_->setPlan(plan_);
  }
  const schedule::DispatchTable& table = directive.table;
  const int L = model_->layerCount();
  const bool oneFOneB = c.pipeline.schedule == config::PipelineSchedule::kOneFOneB;
  // Uploads this iteration makes of each layer: by its forward and its backward job, once if it is in the
  // fused stage, once in 1F1B (the worker keeps its stage for both directions).
  auto& uploadsAfter = uploadsAfter_[static_cast<std::size_t>(step % versions_)];
  for (int l = 0; l < L; ++l) {
    uploadsAfter[static_cast<std::size_t>(l)] += l >= plan_.fused.begin || oneFOneB ? 1 : 2;
  }
  optimizer_->beginIteration(step, uploadsAfter);  // async: W_step's copy, once these uploads have landed
  // Note [Gradients taken during the backward]: the step's update is queued before its jobs run, so the optimizer
  // thread takes each layer's gradients — widens them to float32 and sums their squares for the norm — as that
  // layer's downloads land, while the backward of the layers below still runs, instead of all of them after the
  // iteration (the sync step's tail; with one worker every gradient lands during its last job). The queue's order
  // is the same (async: W_step's copy, then this update, then W_step+1's copy at the next iteration's start);
  // only the time the update starts waiting moved. Its waits are the fences' (stall timeout included: an
  // iteration, not a job, must finish within pipeline.stall_timeout_s), and a run that stops mid-iteration stops
  // the thread in them.
  optimizer_->enqueue(step);
  const auto next =
      schedule::nextTable(plan_, workers_, table, c.pipeline.schedule == config::PipelineSchedule::kRoundPipe,
                          c.pipeline.dispatch);  // Note [Prefetch across iterations]
  const std::int64_t jobs =
      jobs_->runIteration(step, table, data, optimizer_->lossScaleFor(step), next ? &*next : nullptr);
  stepSizes_.back().waits = waits.counts();
  stepSizes_.back().jobs = jobs;
  recordDeviceSpans(step, stepSizes_.back());
  // This rank's per-layer timings of the iteration, for the partitioner (averaged per microbatch).
  std::vector<double> forwardMs = jobs_->forwardMs(), backwardMs = jobs_->backwardMs();
  for (int l = 0; l < L; ++l) {
    for (auto* ms : {&forwardMs[static_cast<std::size_t>(l)], &backwardMs[static_cast<std::size_t>(l)]}) {
      if (*ms >= 0) *ms /= static_cast<double>(c.train.microbatches);
    }
  }
  coordination_->report(step, forwardMs, backwardMs);
  // The next iteration starts as soon as the fences allow: sync, each of its uploads waits for that layer's
  // update (W_{t+1}, Note [Update by layer]); async, for the copy of older weights.
}

control::StallPolicy PipelineRuntime::stallPolicy() const {
  return {config_.pipeline.stallWarnSeconds, config_.pipeline.stallTimeoutSeconds};
}

// For stall messages: what a world rank was last doing (known for the ranks of this node).
std::function<std::string(int)> PipelineRuntime::describeWorldRank() const {
  return [this](int r) { return engine::describeWorldRank(*activity_, id_, r); };
}

// Sampling (before and after training) reads the weights in place from the store, on the host.
std::string PipelineRuntime::sample(const std::string& prompt) {
  bindToStore();
  std::string text = run::sample(model_->model(), *tokenizer_, config_, prompt);
  model_->unbindAll();
  return text;
}

// After `steps` steps every rank's optimizer has written its slices of the masters W_steps into the node
// store; rank 0 binds the model to them (cast to the model dtype where it is not float32) and evaluates on
// the CPU, as sample() does, while the others go on to wait for its next directive.
std::optional<run::EvalResult> PipelineRuntime::evaluate(std::int64_t steps) {
  if (evalRows_.empty()) return std::nullopt;
  if (steps > startStep_) optimizer_->waitFor(steps - 1);
  channel_->barrier();
  if (!leader_) return std::nullopt;
  std::vector<torch::Tensor> cast;  // the masters in the model dtype, alive while bound
  for (int i = 0; i < static_cast<int>(model_->tensors().size()); ++i) {
    const auto& t = model_->tensors()[static_cast<std::size_t>(i)];
    if (!t.trainable || masters() != Masters::kOwn) {  // the weights are the masters (split: rounded)
      model_->bind(i, store_->bytes(weightRegion(t.name)));
      continue;
    }
    torch::Tensor master = storeTensor(masterRegion(t.name), t.local.sizes(), torch::kFloat);
    if (model_->dtype() != torch::kFloat) master = cast.emplace_back(master.to(model_->dtype()));
    model_->bind(i, master.data_ptr());
  }
  const auto& c = config_;
  const run::EvalResult r =
      run::evaluate(model_->model(), evalRows_, rowsPerMicrobatch_ * id_.nodeCount, c.train.lossChunkTokens);
  model_->unbindAll();
  return r;
}

std::vector<trace::StepMetrics> PipelineRuntime::run() {
  const run::RunResult result = run::runLoop(config_, *this);
  preempted_ = result.outcome == run::Outcome::kPreempted;
  return result.metrics;
}

bool PipelineRuntime::step(std::int64_t step, int signal) {
  if (!lastFinished_) {
    lastFinished_ = std::chrono::steady_clock::now();
    lastHostCpu_ = cpu::hostCpu();
  }
  // Rank 0's plan and dispatch table for this iteration, or its order to stop (a preemption signal reached
  // some rank: Coordination::requestStop).
  if (signal != 0) coordination_->requestStop(signal);
  if (worldRank_ != 0) jobs_->holdForPrefetch(step);  // testing: Note [Hold for prefetch] (rank 0 waits for none)
  const auto directive = coordination_->begin(step, describeWorldRank(), [this] {
    return jobs_->tryPrefetchMeanwhile();  // Note [Prefetch while waiting for the directive]
  });
  if (directive.stop) return false;
  runStep(step, directive);
  return true;
}

run::StopCause PipelineRuntime::stopCause() const {
  const auto [signal, rank] = coordination_->stopCause();
  return {signal, rank};
}

// Rank 0 reports steps as its optimizer finishes them (in async mode, while later iterations run); the step
// time is the time between consecutive finished optimizer steps.
std::vector<trace::StepMetrics> PipelineRuntime::finished() {
  const std::vector<OptimizerResult> results = optimizer_->poll();  // every rank: rethrows the thread's error
  std::vector<trace::StepMetrics> out;
  for (const auto& r : results) {
    // Note [Host CPU by role]: every rank's CPU time in the step, by role, on its trace's counter track.
    std::map<std::string, double> hostCpuMs;
    trace::Counter counter{"host cpu ms", timeline_->usAt(r.finished), {{"step", static_cast<double>(r.step + 1)}}};
    for (std::size_t i = 0; i < cpu::kRoles; ++i) {
      const double ms = (r.hostCpu.seconds[i] - lastHostCpu_.seconds[i]) * 1e3;
      hostCpuMs[cpu::roleName(static_cast<cpu::Role>(i))] = ms;
      counter.values.emplace_back(cpu::roleName(static_cast<cpu::Role>(i)), ms);
    }
    lastHostCpu_ = r.hostCpu;
    timeline_->count(std::move(counter));
    if (!leader_) continue;
    const StepSize& size = stepSizes_[static_cast<std::size_t>(r.step - startStep_)];
    trace::StepMetrics m;
    m.step = r.step + 1;
    m.loss = r.lossSum / static_cast<double>(std::max<std::int64_t>(1, size.targets));
    m.lr = r.lr;
    m.gradNorm = r.gradNorm;
    m.skipped = r.skipped;
    m.rankPeakResidentMb = r.rankPeakMb;
    if (r.lossScale > 0) m.lossScale = r.lossScale;
    m.tokens = size.tokens;
    m.targetTokens = size.targets;
    m.epoch = size.epoch;
    m.jobs = size.jobs;
    for (int w = 0; w < device::kHostWaitReasons; ++w) {
      m.hostWaits[device::hostWaitName(static_cast<device::HostWait>(w))] = size.waits[static_cast<std::size_t>(w)];
    }
    m.device = deviceLabel_;
    m.deviceBusyMs = size.deviceBusyMs;
    m.linkUpMs = size.linkUpMs;
    m.linkDownMs = size.linkDownMs;
    m.hostCpuMs = std::move(hostCpuMs);
    m.stepTimeSeconds = std::chrono::duration<double>(r.finished - *lastFinished_).count();
    m.tokensPerSecond = static_cast<double>(m.tokens) / m.stepTimeSeconds;
    lastFinished_ = r.finished;
    out.push_back(m);
  }
  return out;
}

void PipelineRuntime::drain(std::int64_t steps) {
  jobs_->dropPrefetch();  // of an iteration that will not run, reading weights the final publication rewrites
  coordination_->finish(steps, describeWorldRank());
  if (steps > startStep_) optimizer_->waitFor(steps - 1);
  trainingMemory_ = readResidentMemory();  // before the final checkpoint stages its copy of the state
}

}  // namespace rp::engine
