// The stage-job executor (job_executor.h; docs/schedule.md, "Runtime"): one microbatch of a job and its
// tensors on the tensor plane, whole stage jobs, and 1F1B's interleaving. The copies between the node store
// and the stage slots (weights in, gradients out) are in job_store_copies.cpp.
#include "engine/job_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <thread>

#include "common/env.h"
#include "common/fault.h"
#include "control/channel.h"
#include "device/host_waits.h"
#include "engine/regions.h"
#include "model/libtorch.h"
#include "trace/formats.h"

namespace rp::engine {

using namespace detail;

JobExecutor::JobExecutor(JobContext c, std::unique_ptr<StageSlots> slots,
                         std::unique_ptr<transport::TensorChannel> tensors)
    : config_(c.config),
      model_(&c.model),
      store_(&c.store),
      fences_(&c.fences),
      activity_(&c.activity),
      timeline_(c.timeline),
      worker_(&c.worker),
      proxyCosts_(c.proxyCosts),
      emulated_(c.worker, c.model),
      rank_(c.rank),
      worldRank_(c.worldRank),
      nodeCount_(c.nodeCount),
      versions_(c.versions),
      rowsPerMicrobatch_(c.rowsPerMicrobatch),
      device_(torchDevice(c.worker.placement())),
      auxLoss_(c.model.model().config().moe.auxLoss()),
      moe_(c.model.model().config().moe.numExperts > 0),
      skipUploads_(env::getInt(env::kBenchNoUploads) != 0),
      holdForPrefetch_(env::getInt(env::kHoldForPrefetch) != 0),
      mutation_(testMutation()),
      slots_(std::move(slots)),
      tensors_(std::move(tensors)) {
  if (mutation_ != TestMutation::kNone && !worker_->sanitizes()) {
    RP_THROW(InputError,
             "RP_TEST_MUTATE = \"{}\" puts an ordering mistake into the engine for the emulated device's sanitizer to "
             "report; on {} it would only race: unset it",
             env::get(env::kTestMutate), worker_->describe());
  }
  if (mutation_ == TestMutation::kSlotReleaseKeepsFirstMark) slots_->keepFirstReleaseMark();
}

JobExecutor::TestMutation JobExecutor::testMutation() {
  const std::string name = env::get(env::kTestMutate);
  if (name.empty()) return TestMutation::kNone;
  if (name == "activation-without-compute-after") return TestMutation::kActivationWithoutComputeAfter;
  if (name == "gradient-marks-first-microbatch") return TestMutation::kGradientMarksFirstMicrobatch;
  if (name == "slot-release-keeps-first-mark") return TestMutation::kSlotReleaseKeepsFirstMark;
  if (name == "weight-copy-previous-mark") return TestMutation::kWeightCopyPreviousMark;
  if (name == "weights-not-awaited") return TestMutation::kWeightsNotAwaited;
  RP_THROW(InputError,
           "RP_TEST_MUTATE = \"{}\": expected activation-without-compute-after, gradient-marks-first-microbatch, "
           "slot-release-keeps-first-mark, weight-copy-previous-mark or weights-not-awaited",
           name);
}

JobExecutor::~JobExecutor() {
  if (prefetch_) prefetch_->ticket.wait();  // never free memory the copy thread still writes
  // An upload given up while it waited for a layer to be published: its copies land first (an error of theirs
  // comes after the one being reported).
  while (!uploading_.done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (const auto& p : puts_) p.copy.wait();  // nor memory a put's copy still reads
}

std::vector<std::int64_t> JobExecutor::activationShape(const config::RunConfig& config, const PipelineModel& model,
                                                       std::int64_t rowsPerMicrobatch) {
  return {rowsPerMicrobatch, config.train.seqLen, model.model().config().hiddenSize};
}

// Stage grain checkpoints the input of every backward stage; layer grain the input of every layer.
void JobExecutor::setPlan(const schedule::Plan& plan) {
  dropPrefetch();  // the slots may be re-sized
  checkpoint_.assign(static_cast<std::size_t>(model_->layerCount()),
                     config_.pipeline.recompute == config::Recompute::kLayer);
  for (const auto& r : plan.backward) checkpoint_[static_cast<std::size_t>(r.begin)] = true;
  slots_->fit(*model_, plan);
}

std::int64_t JobExecutor::runIteration(std::int64_t step, const schedule::DispatchTable& table, const StepData& data,
                                       double lossScale, const schedule::DispatchTable* next) {
  lossScale_ = lossScale;
  stepTargets_ = data.targets;
  next_ = next;
  const auto L = static_cast<std::size_t>(model_->layerCount());
  forwardMs_.assign(L, kNotMeasured);
  backwardMs_.assign(L, kNotMeasured);
  std::int64_t jobs = 0;
  for (const auto& job : table.jobs) jobs += job.worker == rank_ ? 1 : 0;
  if (config_.pipeline.schedule == config::PipelineSchedule::kOneFOneB) {
    namingOutOfMemory(step, "its 1F1B stage", [&] { runOneFOneB(step, table, data); });
  } else {
    for (std::size_t k = 0; k < table.jobs.size(); ++k) {
      const schedule::Job& job = table.jobs[k];
      if (job.worker != rank_) continue;
      const std::string what = fmt::format("the {} job over layers {}-{}", schedule::jobKindName(job.kind),
                                           job.layers.begin, job.layers.end - 1);
      namingOutOfMemory(step, what, [&] { runJob(step, static_cast<std::int64_t>(k), table, data); });
    }
    // No job here this iteration: the next one's first, tried while this rank waits for the directive.
    if (jobs == 0) prefetchNext(step, static_cast<std::int64_t>(table.jobs.size()) - 1, table, next);
  }
  next_ = nullptr;
  landPuts();        // the hand-offs' sources may go; the next iteration's tensors reuse their places
  resolveTimings();  // once per iteration: the host never waits for the device's clock between two jobs
  return jobs;
}

// Note [Out of worker memory]: a job that outgrows the worker's memory (on a GPU: the card, or the cap of
// pipeline.memory_limit_gb) fails with LibTorch's OutOfMemoryError deep inside an operator; the rank stops with
// an InputError that names the job, the step, the microbatch's tokens and the settings that change its memory,
// followed by LibTorch's own account. RP_FAULT_INJECT's "oom" action at point "job" fails a job so (the CPU
// has no such limit to run into).
void JobExecutor::namingOutOfMemory(std::int64_t step, const std::string& what, const std::function<void()>& run) {
  try {
    if (fault::maybeInject(worldRank_, step, "job")) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "fault injection: out of memory in ", what);
    }
    run();
  } catch (const c10::OutOfMemoryError& e) {
    const std::string torch = e.what_without_backtrace();
    RP_THROW(InputError,
             "rank {}: the worker ran out of memory in {} of step {}, at {} tokens per microbatch ({} row(s) of "
             "train.seq_len {}): shorten train.seq_len, put fewer rows in a microbatch (train.global_batch / "
             "train.microbatches), recompute layer by layer (pipeline.recompute = \"layer\", "
             "pipeline.recompute_ahead = 0), or give the worker more memory (pipeline.memory_limit_gb, "
             "pipeline.memory_reserve_gb). LibTorch: {}",
             worldRank_, what, step + 1, rowsPerMicrobatch_ * config_.train.seqLen, rowsPerMicrobatch_,
             config_.train.seqLen, torch.substr(0, torch.find('\n')));
  }
}

// A tensor of the tensor plane into worker memory (ahead of any queued weight copy) — `writer`'s hand-off or a
// saved tensor (transport::kSaved) — and out of it, for `readers`. Note [Stream-ordered hand-offs]: neither
// waits on the host. A fetched tensor's copy orders the compute that reads it (Worker::computeAfter: on a GPU
// the compute stream waits on the copy's event); a put's copy is left in flight with its source tensor held,
// and the microbatch's readiness message goes out once its puts have landed (the tensor channel's sender,
// Note [Readiness sender]), which is what lets another rank read them. Only a get of a tensor this rank put
// itself (a hand-off to its own next job, a saved input it wrote) first waits for that put, and the end of
// the iteration waits once for all that are still in flight (landPuts).
torch::Tensor JobExecutor::fetch(const transport::TensorId& id, at::IntArrayRef shape, int writer) {
  if (writer == rank_ || writer == transport::kSaved) landPuts(&id);
  torch::Tensor local = torch::empty(shape, torch::TensorOptions().dtype(model_->dtype()).device(device_));
  const device::Ticket got = tensors_->get(id, local.data_ptr(), static_cast<std::size_t>(local.nbytes()), writer);
  if (emulated_.active()) {  // Note [Device sanitizer]: the copy fills an input the next compute reads
    const device::Region input{device::Region::Kind::kInput, ++fetches_};
    worker_->declareCopy({{},
                          {input},
                          fmt::format("fetch of {} of layer {}, mb {}, step {}",
                                      id.kind == transport::TensorKind::kActivation ? "activation" : "gradient",
                                      id.layer, id.microbatch, id.step + 1)});
    emulated_.willRead(input);
  }
  if (mutation_ != TestMutation::kActivationWithoutComputeAfter) worker_->computeAfter(got);
  return local;
}

void JobExecutor::put(const transport::TensorId& id, const torch::Tensor& tensor, const transport::Readers& readers) {
  while (!puts_.empty() && puts_.front().copy.done()) {  // their sources may go
    puts_.front().copy.throwIfFailed();
    puts_.pop_front();
  }
  const torch::Tensor t = tensor.contiguous();
  device::Ticket copy = tensors_->put(id, t.data_ptr(), static_cast<std::size_t>(t.nbytes()), readers);
  microbatchPuts_.push_back(copy);
  puts_.push_back({id, std::move(copy), t});
}

// One wait for this rank's puts in flight: of tensor `*only`, or all of them.
void JobExecutor::landPuts(const transport::TensorId* only) {
  auto match = [&](const PutInFlight& p) {
    return !only || (p.id.step == only->step && p.id.layer == only->layer && p.id.microbatch == only->microbatch &&
                     p.id.kind == only->kind);
  };
  if (std::none_of(puts_.begin(), puts_.end(), match)) return;
  device::countHostWait(device::HostWait::kCopy);
  device::CountHostWaits asOne;  // the tickets below are that one wait
  for (const auto& p : puts_) {
    if (match(p)) p.copy.wait();
  }
  puts_.erase(std::remove_if(puts_.begin(), puts_.end(), match), puts_.end());
}

// One microbatch of job k: wait for job k-1's output of that microbatch, compute, tell job k+1's worker.
void JobExecutor::runMicrobatch(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table,
                                const StepData& data, int mb, Recomputed* ahead) {
  const schedule::Job& job = table.jobs[static_cast<std::size_t>(k)];
  const int L = model_->layerCount();
  const std::vector<std::int64_t> shape = activationShape(config_, *model_, rowsPerMicrobatch_);
  const bool hasPrev = k > 0, hasNext = k + 1 < static_cast<std::int64_t>(table.jobs.size());
  const int prevWorker = hasPrev ? table.jobs[static_cast<std::size_t>(k - 1)].worker : -1;
  const int nextWorker = hasNext ? table.jobs[static_cast<std::size_t>(k + 1)].worker : -1;
  const double norm = 1.0 / static_cast<double>(std::max<std::int64_t>(1, data.targets));
  if (hasPrev && prevWorker != rank_) {
    const std::string what = fmt::format("wait: job {} mb {} (step {}) from rank {}", k - 1, mb, step + 1, prevWorker);
    activity_->set(rank_, 0, what);
    trace::Timeline::Scope wait(timeline_, what, "wait", 0);
    device::countHostWait(device::HostWait::kPeer);
    tensors_->await(prevWorker, {control::kProtocolVersion, static_cast<std::uint32_t>(mb), step, k - 1},
                    [&] { return activity_->describe(prevWorker) + activity_->silentRanks(); });
  }
  const model::Batch& batch = data.batches[static_cast<std::size_t>(mb)];
  const model::AttentionContext& ctx = data.contexts[static_cast<std::size_t>(mb)];
  const int a = job.layers.begin, b = job.layers.end;
  const std::string what = trace::computeSpanName({schedule::jobKindName(job.kind), a, b - 1, mb, step + 1});
  activity_->set(rank_, 0, what);
  trace::Timeline::Scope compute(timeline_, what, "compute", 0);
  const auto stream = worker_->enterCompute();
  switch (job.kind) {
    case schedule::JobKind::kForward: {
      torch::NoGradGuard noGrad;
      torch::Tensor x =
          a == 0 ? torch::Tensor() : fetch({step, a, mb, transport::TensorKind::kActivation}, shape, prevWorker);
      for (int l = a; l < b; ++l) {
        if (l > a && checkpoint_[static_cast<std::size_t>(l)])
          put({step, l, mb, transport::TensorKind::kActivation}, x, {-1, true});
        const auto start = worker_->mark();
        model::RouterStats router;
        model::ExpertChoice choice;
        emulated_.forward(l, ctx, /*withGradients=*/false);
        x = model_->forward(l, x, batch, ctx, auxLoss_ ? &router : nullptr, moe_ ? &choice : nullptr);
        timings_.push_back({start, worker_->mark(), l, l + 1, /*forward=*/true, /*backward=*/false});
        if (auxLoss_) routerBoard(step).putLayer(mb, l, router);
        if (choice.experts.defined()) routingTape(step).put(mb, l, choice);  // Note [Routing tape]
      }
      // The next job's input, and a backward stage's saved input where one starts here.
      put({step, b, mb, transport::TensorKind::kActivation}, x,
          {nextWorker, b < L && checkpoint_[static_cast<std::size_t>(b)]});
      break;
    }
    case schedule::JobKind::kFused: {
      fences_->setFusedStarted(step, mb);  // every stage input of mb is saved (Note [Recompute ahead])
      torch::Tensor input =
          a == 0 ? torch::Tensor()
                 : fetch({step, a, mb, transport::TensorKind::kActivation}, shape, prevWorker).requires_grad_(true);
      torch::Tensor x = input;
      // The fused stage's backward cost (what the partitioner packs it by) is its forward plus its share of
      // the backward pass.
      auto timed = [&](int l, auto&& fn) {
        const auto start = worker_->mark();
        auto out = fn();
        timings_.push_back({start, worker_->mark(), l, l + 1, /*forward=*/true, /*backward=*/true});
        return out;
      };
      // MoE: the router statistics of the layers before this stage, then this stage's (Note [Router statistics]).
      model::RouterStats router;
      if (auxLoss_) {
        router = routerBoard(step).before(mb, a);
        if (router.rows > 0) {
          router.counts = router.counts.to(device_);
          router.probSums = router.probSums.to(device_);
        }
      }
      for (int l = a; l < L - 1; ++l) {
        x = timed(l, [&] {
          emulated_.forward(l, ctx, /*withGradients=*/false);
          torch::Tensor y = model_->forward(l, x, batch, ctx, auxLoss_ ? &router : nullptr);
          expectBackwardAt(y, l, ctx);
          return y;
        });
      }
      model::LossSum loss = timed(L - 1, [&] {
        emulated_.forward(L - 1, ctx, /*withGradients=*/true);
        return model_->loss(x, batch, config_.train.lossChunkTokens);
      });
      if (fault::maybeInject(worldRank_, step, "loss")) loss.sum = loss.sum * std::numeric_limits<double>::quiet_NaN();
      const auto start = worker_->mark();
      torch::Tensor objective = loss.sum * (norm * lossScale_);  // fp16: the gradients of the scaled loss
      // The microbatch's loss stays on the device until the job ends (writeLosses): one read per job.
      torch::Tensor lossSum = loss.sum.detach().to(torch::kDouble);
      if (auxLoss_ && router.rows > 0) {
        const auto aux = model::routerAuxLoss(router, model_->model().config().moe);
        objective = objective + aux * (lossScale_ * auxWeight());
        routerBoard(step).putTotal(mb, router);
        // The load-balancing loss as a token-loss sum (the loss region holds sums).
        lossSum = lossSum + aux.detach().to(torch::kDouble) * auxWeight() * static_cast<double>(data.targets);
      }
      objective.backward();
      emulated_.settle();  // Note [Kernel counts per layer]
      timings_.push_back({start, worker_->mark(), a, L, /*forward=*/false, /*backward=*/true});
      pendingLosses_.emplace_back(mb, lossSum);
      if (a > 0) put({step, a, mb, transport::TensorKind::kGradient}, input.grad(), {nextWorker, false});
      break;
    }
    case schedule::JobKind::kBackward: {
      if (config_.pipeline.recompute == config::Recompute::kLayer) {
        // Layer grain: recompute and back-propagate one layer at a time from its checkpointed input, so only
        // one layer's activations are alive.
        torch::Tensor grad = fetch({step, b, mb, transport::TensorKind::kGradient}, shape, prevWorker);
        for (int l = b - 1; l >= a; --l) {
          const auto start = worker_->mark();
          const Recomputed r = l == b - 1 && ahead ? std::move(*ahead) : recompute(step, l, l + 1, data, mb);
          if (r.output.requires_grad()) backPropagate(step, mb, r, grad);
          if (l > 0) grad = r.input.grad();
          timings_.push_back({start, worker_->mark(), l, l + 1, /*forward=*/false, /*backward=*/true});
          // The job's last microbatch: layer l's gradients are final, so they go to the optimizer now, while
          // the layers below are still back-propagated (Note [Layer fences]). Not part of the layer's time.
          if (downloadsPerLayer_ && mb + 1 == config_.train.microbatches) download(step, {l, l + 1});
        }
        if (a > 0) put({step, a, mb, transport::TensorKind::kGradient}, grad, {nextWorker, false});
        break;
      }
      const auto start = worker_->mark();
      const Recomputed r = ahead ? std::move(*ahead) : recompute(step, a, b, data, mb);  // stage grain
      // A stage of frozen layers over the token ids (LoRA: the embedding) has nothing to differentiate; its
      // gradient is read all the same, as every hand-off is: peer links pair each send with a receive (Note
      // [Link order]).
      const torch::Tensor grad = fetch({step, b, mb, transport::TensorKind::kGradient}, shape, prevWorker);
      if (r.output.requires_grad()) backPropagate(step, mb, r, grad);
      timings_.push_back({start, worker_->mark(), a, b, /*forward=*/false, /*backward=*/true});
      if (a > 0) put({step, a, mb, transport::TensorKind::kGradient}, r.input.grad(), {nextWorker, false});
      break;
    }
  }
  if (hasNext && nextWorker != rank_) {
    tensors_->signal(nextWorker, {control::kProtocolVersion, static_cast<std::uint32_t>(mb), step, k},
                     std::move(microbatchPuts_));
  }
  microbatchPuts_.clear();
}

// Note [Recompute ahead]: a backward job's microbatch needs two things — its saved stage input (written in
// the forward pass) for the recompute, and the gradient from the previous job for the backward proper. With
// pipeline.recompute_ahead = R > 0 the job recomputes microbatches 0..R-1 first, then after the backward of m
// the recompute of m+R, so a recompute runs while the worker would otherwise wait for a gradient; at most R
// recomputed graphs are held beside the one being back-propagated (R as the worker's memory allows: Note
// [Recompute ahead within the budget], costs.cpp). A saved input of microbatch m is in place once the fused stage
// has started m (every forward stage put it before signalling the next), which the fusedStarted fence publishes;
// that wait is the only new one, and the fused stage never waits on a backward job, so it cannot deadlock.
// Losses and gradients are unchanged: the same ops on the same inputs.

// Layers [from, to) of microbatch mb recomputed from the saved input of `from`, with their graph.
JobExecutor::Recomputed JobExecutor::recompute(std::int64_t step, int from, int to, const StepData& data, int mb) {
  const std::vector<std::int64_t> shape = activationShape(config_, *model_, rowsPerMicrobatch_);
  const model::Batch& batch = data.batches[static_cast<std::size_t>(mb)];
  const model::AttentionContext& ctx = data.contexts[static_cast<std::size_t>(mb)];
  Recomputed r;
  if (from > 0) {
    r.input =
        fetch({step, from, mb, transport::TensorKind::kActivation}, shape, transport::kSaved).requires_grad_(true);
  }
  r.output = r.input;
  for (int l = from; l < to; ++l) {
    // Note [Routing tape]: the experts the forward stage chose.
    model::ExpertChoice choice = model_->sparse(l) ? routingTape(step).get(mb, l) : model::ExpertChoice{};
    emulated_.forward(l, ctx, /*withGradients=*/false);
    r.output = model_->forward(l, r.output, batch, ctx, auxLoss_ ? &r.router : nullptr, &choice);
    expectBackwardAt(r.output, l, ctx);
  }
  return r;
}

// Note [Emulated device]: a hook on layer l's output runs as the backward reaches it, before layer l's own
// backward is submitted (the last layer's too: the gradient handed to backward() passes its hooks first), so
// the device's compute stream holds each layer's backward in the order autograd submits them, and a gradient
// mark taken in a later hook falls after that layer's backward.
void JobExecutor::expectBackwardAt(const torch::Tensor& output, int l, const model::AttentionContext& ctx) {
  if (!emulated_.active() || !output.requires_grad()) return;
  output.register_hook(
      [this, work = emulated_.backwardWork(l, ctx)](const torch::Tensor&) { emulated_.backward(work); });
}

void JobExecutor::backPropagate(std::int64_t step, int mb, const Recomputed& r, const torch::Tensor& grad) {
  if (!auxLoss_ || r.router.rows == 0) {
    r.output.backward(grad);
    emulated_.settle();  // Note [Kernel counts per layer]
    return;
  }
  // Note [Router statistics]: the fused stage has run mb (its gradient reached us), so its total is written.
  const model::RouterStats total = routerBoard(step).total(mb);
  const double scale = model::routerAuxScale(model_->model().config().moe, total.rows) * lossScale_ * auxWeight();
  const auto share = (total.counts.to(device_) * r.router.probSums).sum() * scale;
  torch::autograd::backward({r.output, share}, {grad, torch::ones_like(share)});
  emulated_.settle();
}

RouterBoard JobExecutor::routerBoard(std::int64_t step) const {
  return RouterBoard(store_->bytes(routerRegion(step, versions_ + 1)), static_cast<int>(config_.train.microbatches),
                     model_->layerCount(), static_cast<int>(model_->model().config().moe.numExperts));
}

RoutingTape JobExecutor::routingTape(std::int64_t step) const {
  const model::MoeConfig& moe = model_->model().config().moe;
  return RoutingTape(store_->bytes(routingRegion(step, versions_ + 1)), static_cast<int>(config_.train.microbatches),
                     model_->layerCount(), rowsPerMicrobatch_ * config_.train.seqLen,
                     static_cast<int>(moe.expertsPerToken), static_cast<int>(moe.numExperts));
}

double JobExecutor::auxWeight() const {
  return 1.0 / static_cast<double>(config_.train.microbatches * nodeCount_);
}

// The recompute of a backward job's microbatch before its gradient arrives: the whole stage, or at layer
// grain the deepest layer (the first the gradient meets). Timed as the stage's backward.
JobExecutor::Recomputed JobExecutor::recomputeAhead(std::int64_t step, const schedule::Job& job, const StepData& data,
                                                    int mb) {
  const int a = config_.pipeline.recompute == config::Recompute::kLayer ? job.layers.end - 1 : job.layers.begin;
  const int b = job.layers.end;
  emulated_.microbatch(mb);
  {
    const std::string what = fmt::format("wait: saved inputs of mb {} (step {})", mb, step + 1);
    activity_->set(rank_, 0, what);
    trace::Timeline::Scope wait(timeline_, what, "wait", 0);
    device::countHostWait(device::HostWait::kPeer);
    fences_->waitFusedStarted(step, mb);
  }
  const std::string what = trace::computeSpanName({"recompute", a, b - 1, mb, step + 1});
  activity_->set(rank_, 0, what);
  trace::Timeline::Scope compute(timeline_, what, "compute", 0);
  const auto stream = worker_->enterCompute();
  const auto start = worker_->mark();
  Recomputed r = recompute(step, a, b, data, mb);
  timings_.push_back({start, worker_->mark(), a, b, /*forward=*/false, /*backward=*/true});
  return r;
}

// The compute spans of the iteration's jobs, at its end: one wait for the last mark (the last job's downloads
// have mostly waited for it already), then every span's time, without stopping the compute at a layer, a
// microbatch or between two jobs (the next job's compute is queued behind the previous one's). A span over
// several layers (a backward stage) is spread over them in proportion to their predicted cost.
void JobExecutor::resolveTimings() {
  if (timings_.empty()) return;
  device::countHostWait(device::HostWait::kTiming);
  for (const auto& t : timings_) {
    const double ms = worker_->elapsedMs(*t.from, *t.to);
    if (t.forward) addMs(forwardMs_[static_cast<std::size_t>(t.begin)], ms);
    if (t.backward) spread(ms, t.begin, t.end, proxyCosts_.layers.forward, backwardMs_);
  }
  timings_.clear();
}

// The fused stage's losses of the job, read from the device in one copy into the step's loss region, before
// the fusedDone fence tells the optimizer they are in. The stack and its copy run on the compute stream, after
// the losses' kernels: on the current (default) stream they would not wait for the compute stream, and the
// optimizer read a step's loss with microbatches missing (the GPU tier's W = 2 LoRA cases, 2026-11-27).
void JobExecutor::writeLosses(std::int64_t step) {
  if (pendingLosses_.empty()) return;
  if (device_.is_meta()) {  // Note [Emulated device]: nothing to read; the read waits for the device all the same
    device::countHostWait(device::HostWait::kLossRead);
    const auto reached = worker_->mark();
    worker_->elapsedMs(*reached, *reached);
    // Synthetic: a uniform guess over the vocabulary, ln(V) a target token, each microbatch its share.
    const double perMicrobatch = std::log(static_cast<double>(model_->model().config().vocabSize)) *
                                 static_cast<double>(stepTargets_) /
                                 static_cast<double>(config_.train.microbatches * nodeCount_);
    double* region = store_->doubles(lossRegion(step, versions_ + 1));
    for (const auto& pending : pendingLosses_) region[pending.first] = perMicrobatch;
    pendingLosses_.clear();
    return;
  }
  const auto onWorker = worker_->enterCompute();
  std::vector<torch::Tensor> sums;
  for (const auto& [mb, sum] : pendingLosses_) sums.push_back(sum);
  device::countHostWait(device::HostWait::kLossRead);
  const torch::Tensor host = torch::stack(sums).to(torch::kCPU).contiguous();
  const double* values = host.data_ptr<double>();
  double* region = store_->doubles(lossRegion(step, versions_ + 1));
  for (std::size_t i = 0; i < pendingLosses_.size(); ++i) region[pendingLosses_[i].first] = values[i];
  pendingLosses_.clear();
}

// A stage job (roundpipe, gpipe): upload, every microbatch back to back, download.
void JobExecutor::runJob(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table,
                         const StepData& data) {
  const schedule::Job& job = table.jobs[static_cast<std::size_t>(k)];
  trace::Timeline::Scope span(timeline_,
                              fmt::format("job {}: {} {}-{} (step {})", k, schedule::jobKindName(job.kind),
                                          job.layers.begin, job.layers.end - 1, step + 1),
                              "job", 2);
  slot_ = 1 - slot_;  // consecutive jobs of a worker alternate between the two stage slots
  const bool prefetched = prefetch_ && prefetch_->of.step == step && prefetch_->of.job == k &&
                          prefetch_->of.layers == job.layers && prefetch_->slot == slot_;
  if (!prefetched) dropPrefetch();  // a guess of this iteration's table that did not hold (Note [Prefetch])
  slots_->bind(*model_, job.layers, slot_);
  if (emulated_.active()) {
    emulated_.at(slot_, fmt::format("job {} ({} {}-{}) of step {}", k, schedule::jobKindName(job.kind),
                                    job.layers.begin, job.layers.end - 1, step + 1));
  }
  if (prefetched) {
    trace::Timeline::Scope wait(timeline_, "wait: prefetched weights", "upload", 0);
    prefetch_->ticket.wait();
    prefetch_.reset();
    for (int l = job.layers.begin; l < job.layers.end; ++l) fences_->addUpload(l, step);
  } else {
    upload(step, job.layers);
  }
  slots_->release(slot_, nullptr);  // Note [Slot release]: computed in until this job's end mark (or a failure)
  prefetchNext(step, k, table, next_);
  model_->model().train();
  // Layer-grain backward jobs download each layer as its last microbatch's backward finishes it, unless a
  // tensor is used by two of the job's layers (its gradient is final only after both).
  std::size_t uses = 0;
  for (int l = job.layers.begin; l < job.layers.end; ++l) uses += model_->tensorsOfLayer(l).size();
  downloadsPerLayer_ = job.kind == schedule::JobKind::kBackward &&
                       config_.pipeline.recompute == config::Recompute::kLayer &&
                       uses == model_->tensorsOf(job.layers.begin, job.layers.end).size();
  const int M = static_cast<int>(config_.train.microbatches);
  if (job.kind == schedule::JobKind::kFused && step > 0) {
    // Note [Recompute ahead]: the fusedStarted fence holds one (step, microbatch); this iteration's fused stage
    // starts after the previous one's last microbatch has, so its value only grows while two iterations overlap.
    trace::Timeline::Scope wait(timeline_, "wait: previous fused stage", "wait", 0);
    device::countHostWait(device::HostWait::kReadiness);
    fences_->waitFusedStarted(step - 1, M - 1);
  }
  const int ahead = job.kind == schedule::JobKind::kBackward ? proxyCosts_.recomputeAhead : 0;  // within the budget
  const bool downloadsAtEnd = job.kind != schedule::JobKind::kForward && !downloadsPerLayer_;
  std::unique_ptr<GradientMarks> marks;  // Note [Gradient marks]: over the last microbatch's backward
  auto run = [&](int mb, Recomputed* recomputed) {
    // Note [Gradient marks] over the last microbatch; a test mutation takes them over the first (Note [Device
    // sanitizer]: its downloads then read gradients the later microbatches still write).
    const int marked = mutation_ == TestMutation::kGradientMarksFirstMicrobatch ? 0 : M - 1;
    if (downloadsAtEnd && mb == marked) marks = gradientMarks(job.layers);
    emulated_.microbatch(mb);
    runMicrobatch(step, k, table, data, mb, recomputed);
    if (mb + 1 == M) holdForPrefetch(step);  // testing: Note [Hold for prefetch]
    tryPrefetch();                           // the next job's weights, if published meanwhile
  };
  if (ahead == 0) {
    for (int mb = 0; mb < M; ++mb) run(mb, nullptr);
  } else {
    std::deque<Recomputed> recomputed;  // Note [Recompute ahead]: microbatches mb..mb+ahead-1
    for (int next = 0, mb = 0; mb < M; ++mb) {
      for (; next < std::min(M, mb + ahead); ++next) recomputed.push_back(recomputeAhead(step, job, data, next));
      Recomputed r = std::move(recomputed.front());
      recomputed.pop_front();
      run(mb, &r);
    }
  }
  if (downloadsAtEnd) download(step, job.layers, marks.get());
  downloadsPerLayer_ = false;
  writeLosses(step);
  releasedBefore_ = std::exchange(releasedLast_, worker_->mark());
  slots_->release(slot_, releasedLast_);  // Note [Slot release]: after the job's last compute
  emulated_.settle();
  worker_->checkAccesses();  // Note [Device sanitizer]: what the job's hooks found
  if (job.kind == schedule::JobKind::kFused) fences_->setFusedDone(step);
  deviceJobPeak_ = std::max(deviceJobPeak_, worker_->takePeakComputeBytes());  // the caching allocator's, per job
}

// 1F1B (weights bound: this worker owns one stage): upload once, then the worker's forward and backward
// microbatches in 1F1B order (schedule::oneFOneBOrder), then download.
void JobExecutor::runOneFOneB(std::int64_t step, const schedule::DispatchTable& table, const StepData& data) {
  std::vector<std::int64_t> mine;
  for (std::size_t k = 0; k < table.jobs.size(); ++k) {
    if (table.jobs[k].worker == rank_) mine.push_back(static_cast<std::int64_t>(k));
  }
  if (mine.empty()) return;
  const schedule::Range layers = table.jobs[static_cast<std::size_t>(mine.front())].layers;
  slots_->bind(*model_, layers, slot_);
  upload(step, layers);
  slots_->release(slot_, nullptr);
  model_->model().train();
  for (const auto& op : schedule::oneFOneBOrder(table, rank_, static_cast<int>(config_.train.microbatches))) {
    emulated_.microbatch(op.microbatch);
    runMicrobatch(step, op.job, table, data, op.microbatch);
  }
  download(step, layers);
  emulated_.settle();
  worker_->checkAccesses();  // Note [Device sanitizer]: what the hooks found
  writeLosses(step);
  slots_->release(slot_, worker_->mark());  // Note [Slot release]
  deviceJobPeak_ = std::max(deviceJobPeak_, worker_->takePeakComputeBytes());
  for (std::int64_t k : mine) {
    if (table.jobs[static_cast<std::size_t>(k)].kind == schedule::JobKind::kFused) fences_->setFusedDone(step);
  }
}

}  // namespace rp::engine
