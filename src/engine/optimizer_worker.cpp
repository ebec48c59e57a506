#include "engine/optimizer_worker.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "common/host_cpu.h"
#include "common/log.h"
#include "common/parallel.h"
#include "common/resident_memory.h"
#include "engine/dtype_copy.h"
#include "optim/adamw_simd.h"
#include "optim/blockwise8.h"
#include "optim/grad_clip.h"
#include "run/setup.h"

namespace rp::engine {
namespace {

// One widening of a gradient slot's slice into its float32 buffer; or, for a gradient read in place (dst null),
// the sums of squares alone of `inPlace`'s values.
struct Widening {
  float* dst;
  const std::uint8_t* src;
  std::size_t n;
  bool add;
  double* blockSums = nullptr;  // the tensor's last widening of the step: its blocks' sums of squares go here
  optim::GradIn inPlace = {};
};

// Note [Gradients read in place]
// The float32 gradient was 4 bytes a parameter of host memory — a fifth of a bfloat16 full fine-tune's — and a
// pass that writes them during the backward for the update to read back. In a sync run on one node without loss
// scaling nothing needs them: the update reads the gradient from the slots the downloads wrote, widening each
// bfloat16 value in registers (optim::GradIn; a tied embedding's two slots added there in the widening's order,
// the deepest use first), and the norm's block sums (Note [Norm while widening]) are taken at the tensor's last
// layer from the same values, widened in registers too. So the update, the norm and
// the clip are bitwise the widened path's (tests/unit/test_adamw_kernels.cpp; the in-process matrix, unit.LatinSquare,
// against the single-process trainer). The slots
// must then stay until the update has read them: a layer's slots are marked consumed after its update (Note
// [Update by layer]) — or, on a skipped step, at its end — instead of after their widening. That costs no wait:
// the next iteration's download of layer l follows its backward, which follows its forward of layer l, which
// already waited for the same update's weights. Not where the gradients change before the update (the exchange
// across nodes sums them, fp16 unscales them), where the next iteration writes the slots before the update
// (async), or for slots of another shape (a float16 slot; a tensor of more uses than two, or of two in float32):
// those keep their float32 gradient (gradientsInPlace, below).

// Note [Norm while widening]
// The global norm needs every gradient once more after its last widening: a pass that reads 4 bytes per
// parameter after the backward, on the path to the update (a third of a sync step's host passes before the
// update on our VM, bench_adamw, before the blocks were summed in eight chains). Instead a tensor's last
// widening of the step (its shallowest layer's) is cut at Note [Blocked sum of squares]'s block boundaries and
// each block's sum is taken right after the block is widened, while it is in cache — during the backward, which
// the widening overlaps. The blocks and their order are sumOfSquares's, so the norm is bitwise the same. Not
// where the gradients change between the widening and the norm: across nodes (the exchange sums them) and with
// fp16 (unscaled first); those keep the pass.
//
// Every widening split over `threads` (common/parallel.h): part p of each goes to thread p.
void widenAll(const std::vector<Widening>& work, c10::ScalarType dtype, int threads) {
  std::size_t elements = 0;
  for (const auto& w : work) elements += w.n;
  const int parts = parallel::partsFor(elements, threads);
  const std::size_t size = c10::elementSize(dtype);
  parallel::forEachPart(parts, [&](int part) {
    for (const auto& w : work) {
      if (w.dst == nullptr) {  // read in place: the sums alone, of the values the widening would write
        const auto [begin, end] = parallel::partOf(w.n, part, parts, optim::kSumBlock);
        for (std::size_t b = begin; b < end; b += optim::kSumBlock) {
          w.blockSums[b / optim::kSumBlock] =
              optim::blockSumOfSquares(w.inPlace.from(b), std::min(optim::kSumBlock, end - b));
        }
        continue;
      }
      if (w.blockSums == nullptr) {
        const auto [begin, end] = parallel::partOf(w.n, part, parts);
        widen(w.dst + begin, w.src + begin * size, end - begin, dtype, w.add);
        continue;
      }
      const auto [begin, end] = parallel::partOf(w.n, part, parts, optim::kSumBlock);
      for (std::size_t b = begin; b < end; b += optim::kSumBlock) {
        const std::size_t n = std::min(optim::kSumBlock, end - b);
        widen(w.dst + b, w.src + b * size, n, dtype, w.add);
        w.blockSums[b / optim::kSumBlock] = optim::blockSumOfSquares(w.dst + b, n);
      }
    }
  });
}

// Part `part` of `parts` of n elements, in units of `grain` (8-bit moments: whole blocks, Note [8-bit states];
// the last unit may be short).
std::pair<std::size_t, std::size_t> sliceOf(std::size_t n, int part, int parts, std::size_t grain = 1) {
  const std::size_t p = static_cast<std::size_t>(parts), r = static_cast<std::size_t>(part);
  const std::size_t units = (n + grain - 1) / grain, base = units / p, extra = units % p;
  const std::size_t begin = (base * r + std::min(r, extra)) * grain;
  return {std::min(begin, n), std::min(begin + (base + (r < extra ? 1 : 0)) * grain, n)};
}

}  // namespace

bool gradientsInPlace(int staleness, bool crossNode, bool lossScaling, c10::ScalarType dtype, std::size_t uses) {
  if (staleness != 0 || crossNode || lossScaling) return false;
  if (dtype == c10::ScalarType::BFloat16) return uses == 1 || uses == 2;
  return dtype == c10::ScalarType::Float && uses == 1;
}

OptimizerWorker::OptimizerWorker(std::vector<OptimTensor> tensors, Fences& fences, OptimizerOptions options,
                                 control::ControlChannel& node)
    : tensors_(std::move(tensors)),
      fences_(fences),
      options_(std::move(options)),
      rank_(node.rank()),
      ranks_(node.size()),
      versions_(std::max(1, options_.staleness)),
      node_(node.duplicate()),
      adamw_(options_.adamw, optim::bestAdamWKernel(), optim::bestAdamW8Kernel()) {
  threads_ = parallel::optimizerThreads(options_.threads, ranks_);
  adamw_.setThreads(threads_);
  if (options_.crossNode != nullptr) crossNode_ = options_.crossNode->duplicate();
  sharded_ = options_.shardAcrossNodes && crossNode_ && crossNode_->size() > 1;
  RP_CHECK(static_cast<int>(options_.losses.size()) == versions_ + 1, "{} loss buffers for {} weight versions",
           options_.losses.size(), versions_);
  // Sync bf16/fp16: the update writes the rounded weights in the same pass (async copies W_t before the
  // update, so it cannot; sharded, the masters are gathered whole before the copy).
  const optim::ModelCopy copy = run::modelCopyFor(options_.dtype);
  fusedCopy_ = options_.staleness == 0 && copy != optim::ModelCopy::kNone && !sharded_;
  RP_CHECK(!options_.splitMaster || (fusedCopy_ && copy == optim::ModelCopy::kBFloat16),
           "split masters need a bfloat16 sync run on unsharded slices");
  byLayer_ = options_.staleness == 0 && !sharded_;  // Note [Update by layer]
  layerGroups_.resize(static_cast<std::size_t>(options_.layers));
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    // 8-bit moments: every rank's and node's part of whole blocks, so that blocks are the tensor's own
    const std::size_t grain =
        t.trainable && options_.adamw.stateBits == 8 && optim::eightBitStates(t.name, t.numel) ? optim::q8::kBlock : 1;
    slices_.push_back(sliceOf(t.numel, rank_, ranks_, grain));
    const auto [begin, end] = slices_.back();
    auto& counts = shardCounts_.emplace_back();
    shards_.emplace_back(0, end - begin);
    if (sharded_ && t.trainable) {
      for (int n = 0; n < crossNode_->size(); ++n) {
        const auto [from, to] = sliceOf(end - begin, n, crossNode_->size(), grain);
        counts.push_back(to - from);
        if (n == crossNode_->rank()) shards_.back() = {from, to - from};
      }
    }
    const bool inPlace =
        t.trainable && gradientsInPlace(options_.staleness, crossNode_ != nullptr, options_.lossScaling.has_value(),
                                        options_.dtype, t.layers.size());
    inPlace_.push_back(inPlace);
    anyInPlace_ = anyInPlace_ || inPlace;
    grads_.emplace_back(t.trainable && !inPlace ? end - begin : 0, threads_);
    blockSums_.emplace_back(t.trainable ? (end - begin + optim::kSumBlock - 1) / optim::kSumBlock : 0, 0.0);
    if (!t.trainable) continue;
    const auto [offset, count] = shards_.back();
    auto* weights = reinterpret_cast<std::uint16_t*>(t.weights.front()) + begin;
    RP_CHECK((t.masterLow != nullptr) == options_.splitMaster, "{}: a split master in a run without them", t.name);
    const optim::GradIn grad = inPlace ? slotGradient(i) : optim::GradIn(grads_.back().data());
    const std::size_t param =
        t.masterLow != nullptr
            ? adamw_.addSplit(t.name, weights, t.masterLow + begin, grad, count, t.numel)
            : adamw_.add(t.name, t.master + begin + offset, grad, count, fusedCopy_ ? weights : nullptr,
                         fusedCopy_ ? copy : optim::ModelCopy::kNone, t.numel);
    // copied (and, by layer, updated) with the shallowest layer that uses it
    auto& group = layerGroups_[static_cast<std::size_t>(*std::min_element(t.layers.begin(), t.layers.end()))];
    group.params.push_back(param);
    group.tensors.push_back(i);
  }
  normWhileWidening_ = !crossNode_ && !options_.lossScaling;  // Note [Norm while widening]
  // A gradient read in place has no buffer for sumOfSquares: its norm is its blocks' sums.
  RP_CHECK(!anyInPlace_ || normWhileWidening_, "gradients read in place need the norm taken from the slots");
  if (options_.lossScaling) {
    scaler_ = std::make_unique<optim::LossScaler>(*options_.lossScaling);
    startScale_ = scaler_->scale();
  }
  thread_ = std::thread([this] { loop(); });
}

// A run ends with the thread idle (PipelineRuntime::drain waits for the last step). Destroyed earlier — a rank
// failing mid-iteration — the thread drops what is queued, and a fence it waits on (a copy waiting for uploads
// the failed iteration never makes) gives up at its next poll.
OptimizerWorker::~OptimizerWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stopping_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OptimizerWorker::stopPoint() const {
  if (stopping_.load(std::memory_order_relaxed)) throw Stopped{};
}

// Note [Copy as the iteration starts]: async's copy of W_t into the version iteration t + k reads overwrites
// what iteration t itself uploads, so it waits for iteration t's uploads — and for nothing else: W_t is the
// master after step t - 1's update, queued before it. Queued as iteration t starts (not with step t's update,
// after the iteration), it runs while the iteration computes, once the update of step t - 1 is done and each
// layer's uploads have landed: a one-stage plan uploads everything as its job starts, so W_t is published
// mid-iteration and iteration t + 1 finds it there (or in its worker's memory already: Note [Prefetch across
// iterations]) instead of waiting for the whole copy after iteration t's last job. The values are the same;
// only the copy moved.
void OptimizerWorker::beginIteration(std::int64_t step, std::vector<std::int64_t> uploadsAfter) {
  if (options_.staleness == 0) return;  // sync: W_{t+1} is published by step t's update
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  queue_.push_back({Work::Kind::kCopy, step, std::move(uploadsAfter)});
  cv_.notify_all();
}

void OptimizerWorker::enqueue(std::int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  queue_.push_back({Work::Kind::kUpdate, step, {}});
  cv_.notify_all();
}

OptimizerResult OptimizerWorker::waitFor(std::int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] {
    return error_ || std::any_of(done_.begin(), done_.end(), [&](const auto& r) { return r.step == step; });
  });
  if (error_) std::rethrow_exception(error_);
  return *std::find_if(done_.begin(), done_.end(), [&](const auto& r) { return r.step == step; });
}

std::vector<OptimizerResult> OptimizerWorker::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  std::vector<OptimizerResult> out(done_.begin() + static_cast<std::ptrdiff_t>(polled_), done_.end());
  polled_ = done_.size();
  return out;
}

// Note [Optimizer priority]: the optimizer's passes run on up to a rank's share of the cores (Note [Optimizer
// threads]) while the rank's main thread issues the jobs — in async mode always, in sync mode while the update
// by layer overlaps the next iteration. Under Linux's fair scheduler runnable threads share a core by weight, so
// sixteen optimizer threads on sixteen cores could leave the issuing thread part of a core at times, and a GPU
// whose queue of launches runs dry idles. The optimizer thread runs at nice +kOptimizerNice, and so do the
// threads its passes start (they inherit it): whenever the issuing thread (or the copy thread, or the tensor
// plane's sender) is runnable it takes the core, and when they wait the optimizer has every core. Raising
// one's own nice value needs no privilege; where the system refuses, the optimizer runs at the process's.
void OptimizerWorker::loop() {
  const cpu::ThreadRole counted(cpu::Role::kOptimizer);  // Note [Host CPU by role]
  if (!parallel::lowerThisThreadsPriority(kOptimizerNice)) {
    RP_LOG_DEBUG("optimizer thread of rank {}: could not lower its priority; it competes with the jobs' thread", rank_);
  }
  while (true) {
    Work work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      if (work.kind == Work::Kind::kCopy) {
        if (options_.activity != nullptr) {
          options_.activity->set(rank_, 1, fmt::format("copy master -> weights (step {})", work.step + 1));
        }
        trace::Timeline::Scope span(options_.timeline, "copy master -> weights", "optimizer", 1);
        copyMasters(work.step, &work.uploadsAfter);  // iteration t + k runs on W_t
        continue;
      }
      const OptimizerResult result = runStep(work.step);
      std::lock_guard<std::mutex> lock(mutex_);
      done_.push_back(result);
    } catch (const Stopped&) {
      return;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

// Master -> weights version t mod V on this rank's slice. Note [Layer fences]: no weight is written while an
// upload may still read it, so each tensor first waits for every upload of every layer using it from that
// version, up to iteration t (its last reader before iteration t + V). Layer by layer from the first, each
// tensor with the shallowest layer that uses it, each layer published as soon as its tensors are written, so
// the uploads that wait for this copy start before it is whole (Note [Upload as published]).
void OptimizerWorker::copyMasters(std::int64_t t, const std::vector<std::int64_t>* uploadsAfter) {
  for (int l = 0; l < options_.layers; ++l) {
    for (const std::size_t i : layerGroups_[static_cast<std::size_t>(l)].tensors) {
      if (uploadsAfter != nullptr) {
        for (int u : tensors_[i].layers) {
          fences_.waitUploads(u, t, (*uploadsAfter)[static_cast<std::size_t>(u)], [this] { stopPoint(); });
        }
      }
      if (!fusedCopy_) {
        trace::Timeline::Scope copy(options_.timeline, fmt::format("copy layer {}", l), "optimizer", 1);
        copyMaster(i, static_cast<int>(t % versions_));
      }
    }
    fences_.setCopied(l, rank_, t + 1);
  }
}

void OptimizerWorker::copyMaster(std::size_t i, int version) {
  const auto& tensor = tensors_[i];
  // Its weights are the master's high halves (Note [Split master]), or the float32 master itself.
  if (tensor.masterLow != nullptr ||
      tensor.weights[static_cast<std::size_t>(version)] == reinterpret_cast<std::uint8_t*>(tensor.master))
    return;
  const auto [begin, end] = slices_[i];
  const std::size_t size = c10::elementSize(options_.dtype);
  const int parts = parallel::partsFor(end - begin, threads_);
  parallel::forEachPart(parts, [&](int part) {
    const auto [from, to] = parallel::partOf(end - begin, part, parts);
    narrowInto(tensor.weights[static_cast<std::size_t>(version)] + (begin + from) * size, tensor.master + begin + from,
               to - from, options_.dtype);
  });
}

// Tensor i's gradient in its slots (Note [Gradients read in place]): this rank's slice of its one slot, or of its two
// bfloat16 ones, the deepest use's first.
optim::GradIn OptimizerWorker::slotGradient(std::size_t i) const {
  const auto& t = tensors_[i];
  const std::size_t begin = slices_[i].first, bytes = begin * c10::elementSize(options_.dtype);
  const std::vector<std::uint8_t*>& slots = t.slots.front();
  if (options_.dtype == c10::ScalarType::Float) return {reinterpret_cast<const float*>(slots.front() + bytes)};
  const auto* deepest = reinterpret_cast<const std::uint16_t*>(slots.back() + bytes);
  return {deepest, slots.size() == 2 ? reinterpret_cast<const std::uint16_t*>(slots.front() + bytes) : nullptr};
}

// Note [Update by layer]: in sync mode iteration t+1 uploads layer l's weights once every rank has published
// copied[l] for step t (Note [Layer fences]), so the update publishes each layer as soon as it is done instead
// of after the whole model: layer by layer from the first, each tensor with the shallowest layer that uses it
// (a tied embedding with layer 0), its bf16/fp16 copy written in the same pass (float32: copied right after).
// Iteration t+1's first stage then waits for the norm and its own layers' update only, and the rest of the
// update runs while it computes; the main thread no longer waits for the step (engine/runtime.cpp). The
// values are the whole step's, bitwise (AdamW::update). Sharded across nodes the masters are gathered whole
// after the update, so that path publishes at the end.
// With gradients read in place, a layer's slots are consumed once the layers up to it are updated: every tensor
// using layer l is in a group <= l.
void OptimizerWorker::updateByLayer(std::int64_t t, const optim::AdamW::Step& step) {
  for (int l = 0; l < options_.layers; ++l) {
    const LayerGroup& group = layerGroups_[static_cast<std::size_t>(l)];
    adamw_.update(step, group.params);
    if (!fusedCopy_) {
      for (const std::size_t i : group.tensors) copyMaster(i, 0);
    }
    fences_.setCopied(l, rank_, t + 1);
    if (anyInPlace_) fences_.setConsumed(l, rank_, t + 1);
  }
}

bool OptimizerWorker::unscaleAndCheck(double scale) {
  const float s = static_cast<float>(scale);
  std::size_t elements = 0;
  for (std::size_t i = 0; i < grads_.size(); ++i) elements += grads_[i].empty() ? 0 : shards_[i].second;
  const int parts = parallel::partsFor(elements, threads_);
  std::vector<std::int32_t> badPart(static_cast<std::size_t>(parts), 0);
  parallel::forEachPart(parts, [&](int part) {
    for (std::size_t i = 0; i < grads_.size(); ++i) {
      if (grads_[i].empty()) continue;
      const auto [begin, end] = parallel::partOf(shards_[i].second, part, parts);
      for (float* g = grads_[i].data() + begin; g != grads_[i].data() + end; ++g) {
        *g /= s;
        badPart[static_cast<std::size_t>(part)] |= std::isfinite(*g) ? 0 : 1;
      }
    }
  });
  std::int32_t bad = *std::max_element(badPart.begin(), badPart.end());
  node_->allreduce(&bad, 1, control::Reduce::kMax);
  if (crossNode_) crossNode_->allreduce(&bad, 1, control::Reduce::kMax);
  return bad == 0;
}

// Known once the step has checked its gradients, before its update: a sync run's next iteration need not wait
// for the update (Note [Update by layer]).
double OptimizerWorker::scaleAfter(std::int64_t step) {
  if (step < scalerStart_) return startScale_;
  std::unique_lock<std::mutex> lock(mutex_);
  const auto known = [&] {
    return std::find_if(scales_.begin(), scales_.end(), [&](const auto& s) { return s.first == step; });
  };
  cv_.wait(lock, [&] { return error_ || known() != scales_.end(); });
  if (error_) std::rethrow_exception(error_);
  return known()->second;
}

double OptimizerWorker::lossScaleFor(std::int64_t step) {
  if (!scaler_) return 1.0;
  return scaleAfter(step - 1 - options_.staleness);
}

void OptimizerWorker::restoreScaler(double scale, std::int64_t goodSteps, std::int64_t skippedSteps,
                                    std::int64_t start) {
  if (!scaler_) return;
  scaler_->restore(scale, goodSteps, skippedSteps);
  scalerStart_ = start;
  startScale_ = scale;
}

// Note [Overlapped gradient exchange]: with several nodes the step's gradients are summed in two levels. Within a
// node the workers' gradient downloads already add up in the node store, so each rank's optimizer reads the
// node's sum of its own slices; across nodes each rank all-reduces those slices with the same local rank of
// every other node (crossNode_), so every byte of the gradient crosses the network once per node, spread over
// the node's ranks. Layers' gradients become final deepest first, while shallower layers are still in their
// backward: a tensor's exchange starts (non-blocking) right after its shallowest layer is taken and is
// progressed while the optimizer waits for the next layer's download (MPI moves a non-blocking collective only
// inside its calls). Only what is still in flight after the last layer is exposed, traced as
// "gradient exchange across nodes (exposed)". Sums are MPI's either way, so the result is the blocking
// exchange's.
OptimizerResult OptimizerWorker::runStep(std::int64_t t) {
  auto doing = [&](const std::string& what) {
    if (options_.activity != nullptr) options_.activity->set(rank_, 1, fmt::format("{} (step {})", what, t + 1));
  };
  OptimizerResult result;
  result.step = t;
  // Gradients, deepest layer first, as each layer's download lands. Across nodes (data parallel: every node's
  // slice holders sum their gradients, each applies the same update) a tensor's sum starts as soon as its
  // slice is final — after its shallowest layer — and runs on while the deeper layers' downloads are awaited
  // (Note [Overlapped gradient exchange]).
  std::optional<trace::Timeline::Scope> gradSpan(std::in_place, options_.timeline, "take gradients", "optimizer", 1);
  std::vector<bool> started(tensors_.size(), false);
  std::vector<std::unique_ptr<control::PendingCollective>> exchanges;
  const auto progress = [&] {
    stopPoint();
    for (auto& exchange : exchanges) exchange->test();
  };
  for (int l = options_.layers - 1; l >= 0; --l) {
    doing(fmt::format("take layer {}'s gradients", l));
    fences_.waitDownloadsPatiently(l, t, progress);  // Note [Gradients taken during the backward]
    std::vector<Widening> widenings;
    std::vector<std::size_t> finals;  // the tensors whose gradient is final after layer l (its shallowest user)
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& tensor = tensors_[i];
      if (!tensor.trainable) continue;
      const auto use = std::find(tensor.layers.begin(), tensor.layers.end(), l);
      if (use == tensor.layers.end()) continue;
      const std::uint8_t* slot =
          tensor.slots[static_cast<std::size_t>(t % versions_)][static_cast<std::size_t>(use - tensor.layers.begin())];
      const auto [begin, end] = slices_[i];
      const bool final = l == *std::min_element(tensor.layers.begin(), tensor.layers.end());
      const std::size_t bytes = begin * c10::elementSize(options_.dtype);
      if (inPlace_[i]) {  // the sums alone, at the last layer (Note [Gradients read in place])
        if (final) widenings.push_back({nullptr, nullptr, end - begin, false, blockSums_[i].data(), slotGradient(i)});
      } else {
        widenings.push_back({grads_[i].data(), slot + bytes, end - begin, started[i],
                             normWhileWidening_ && final ? blockSums_[i].data() : nullptr});
      }
      started[i] = true;
      if (final) finals.push_back(i);
    }
    {
      trace::Timeline::Scope widen(options_.timeline, fmt::format("widen layer {}", l), "optimizer", 1);
      widenAll(widenings, options_.dtype, threads_);
    }
    for (const std::size_t i : finals) {
      if (crossNode_ && !grads_[i].empty()) {
        exchanges.push_back(shardCounts_[i].empty()
                                ? crossNode_->startAllreduce(grads_[i].data(), grads_[i].size(),
                                                             control::Element::kFloat32, control::Reduce::kSum)
                                : crossNode_->startReduceScatter(grads_[i].data(), shardCounts_[i],
                                                                 control::Element::kFloat32, control::Reduce::kSum));
      }
    }
    if (!anyInPlace_) fences_.setConsumed(l, rank_, t + 1);
  }

  gradSpan.reset();
  if (!exchanges.empty()) {
    // What of the exchange the backward did not hide: the trace's exposed exchange time.
    doing("finish the gradient exchange across nodes");
    trace::Timeline::Scope exposed(options_.timeline, "gradient exchange across nodes (exposed)", "optimizer", 1);
    for (auto& exchange : exchanges) exchange->wait();
  }
  result.lr = options_.schedule.at(t);
  if (scaler_) {
    // The scale iteration t's gradients carry (lossScaleFor's rule); every rank agrees on a skip.
    doing("unscale gradients");
    result.lossScale = scaleAfter(t - 1 - options_.staleness);
    result.skipped = !scaler_->update(!unscaleAndCheck(result.lossScale));
    result.lossScaleAfter = scaler_->scale();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      scales_.emplace_back(t, result.lossScaleAfter);
      if (scales_.size() > kScalesKept) scales_.pop_front();
    }
    cv_.notify_all();
    if (result.skipped) {
      result.gradNorm = std::nan("");
      RP_LOG_DEBUG("step {}: non-finite gradients at loss scale {}: skipped", t + 1, result.lossScale);
    }
  }
  // The step's loss: every microbatch's is in (the fused stage ran before the backward stages whose
  // gradients were just taken), so this wait does not delay the update.
  fences_.waitFusedDone(t);
  const double* losses = options_.losses[static_cast<std::size_t>(t % (versions_ + 1))];
  for (int mb = 0; mb < options_.microbatches; ++mb) result.lossSum += losses[mb];
  if (crossNode_) crossNode_->allreduce(&result.lossSum, 1, control::Reduce::kSum);
  if (!result.skipped) {
    doing("AdamW");
    trace::Timeline::Scope updateSpan(options_.timeline, fmt::format("AdamW step {}", t + 1), "optimizer", 1);
    // The global norm: this rank's slices' (sharded: shards') sum of squares, summed over the node's ranks
    // (sharded: and over the nodes).
    double sumSq = 0.0;
    if (normWhileWidening_) {  // the blocks' sums in sumOfSquares's order (Note [Norm while widening])
      for (const auto& sums : blockSums_) {
        for (const double s : sums) sumSq += s;
      }
    } else {
      std::vector<optim::GradBuffer> buffers;
      for (std::size_t i = 0; i < grads_.size(); ++i) {
        buffers.push_back({grads_[i].data(), grads_[i].empty() ? 0 : shards_[i].second});
      }
      sumSq = optim::sumOfSquares(buffers, threads_);
    }
    node_->allreduce(&sumSq, 1, control::Reduce::kSum);
    if (sharded_) crossNode_->allreduce(&sumSq, 1, control::Reduce::kSum);
    result.gradNorm = std::sqrt(sumSq);
    // A diverged step (non-finite loss or norm) is skipped by every rank alike: both are all-reduced.
    result.skipped = !std::isfinite(result.gradNorm) || !std::isfinite(result.lossSum);
    if (!result.skipped) {
      const float clip = optim::clipCoefficient(result.gradNorm, options_.gradClip);
      if (byLayer_) {
        updateByLayer(t, adamw_.beginStep(result.lr, clip));
      } else {
        adamw_.step(result.lr, clip);
        if (sharded_) gatherMasters(t);
      }
    }
  }
  // The next iteration runs on W_{t+1}: published layer by layer as it was updated, or here (no update).
  if (options_.staleness == 0 && (result.skipped || !byLayer_)) copyMasters(t, nullptr);
  if (anyInPlace_ && result.skipped) {
    for (int l = 0; l < options_.layers; ++l) fences_.setConsumed(l, rank_, t + 1);
  }
  result.finished = std::chrono::steady_clock::now();
  result.hostCpu = cpu::hostCpu();
  result.rankPeakMb = gatherPeaks();
  return result;
}

void OptimizerWorker::publishMasters() {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensors_[i].trainable) continue;
    for (int v = 0; v < versions_; ++v) copyMaster(i, v);
  }
}

}  // namespace rp::engine
