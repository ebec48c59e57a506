#include "engine/optimizer_worker.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "optim/adamw_simd.h"
#include "optim/grad_clip.h"

namespace rp::engine {
namespace {

std::pair<std::size_t, std::size_t> sliceOf(std::size_t n, int part, int parts) {
  const std::size_t p = static_cast<std::size_t>(parts), r = static_cast<std::size_t>(part);
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = base * r + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

}  // namespace

OptimizerWorker::OptimizerWorker(std::vector<OptimTensor> tensors, Fences& fences, OptimizerOptions options,
                                 control::ControlChannel& node)
    : tensors_(std::move(tensors)),
      fences_(fences),
      options_(std::move(options)),
      rank_(node.rank()),
      ranks_(node.size()),
      node_(node.duplicate()),
      adamw_(options_.adamw, optim::bestAdamWKernel()) {
  adamw_.setThreads(options_.threads);
  if (options_.crossNode != nullptr) crossNode_ = options_.crossNode->duplicate();
  for (auto& t : tensors_) {
    slices_.push_back(sliceOf(t.numel, rank_, ranks_));
    const auto [begin, end] = slices_.back();
    grads_.emplace_back(t.trainable ? end - begin : 0, 0.0f);
    if (t.trainable) adamw_.add(t.name, t.master + begin, grads_.back().data(), end - begin);
  }
  thread_ = std::thread([this] { loop(); });
}

OptimizerWorker::~OptimizerWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OptimizerWorker::enqueue(std::int64_t step, std::vector<std::int64_t> uploadsAfter) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  queue_.push_back({step, std::move(uploadsAfter)});
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

void OptimizerWorker::loop() {
  while (true) {
    Work work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      const OptimizerResult result = runStep(work);
      std::lock_guard<std::mutex> lock(mutex_);
      done_.push_back(result);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

// Master -> weights on this rank's slice. Note [Layer fences]: no weight is written while an upload of the
// iteration may still read it, so each tensor first waits for every upload of every layer using it.
void OptimizerWorker::copyMasters(const Work& work, bool waitForUploads) {
  const std::int64_t t = work.step;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& tensor = tensors_[i];
    if (!tensor.trainable) continue;
    if (waitForUploads) {
      for (int l : tensor.layers) fences_.waitUploads(l, work.uploadsAfter[static_cast<std::size_t>(l)]);
    }
    const auto [begin, end] = slices_[i];
    std::memcpy(tensor.weights + begin, tensor.master + begin, (end - begin) * sizeof(float));
  }
  for (int l = 0; l < options_.layers; ++l) fences_.setCopied(l, rank_, t + 1);
}

OptimizerResult OptimizerWorker::runStep(const Work& work) {
  const std::int64_t t = work.step;
  auto doing = [&](const std::string& what) {
    if (options_.activity != nullptr) options_.activity->set(rank_, 1, fmt::format("{} (step {})", what, t + 1));
  };
  OptimizerResult result;
  result.step = t;
  if (options_.async) {
    doing("copy master -> weights");
    trace::Timeline::Scope span(options_.timeline, "copy master -> weights", "optimizer", 1);
    copyMasters(work, /*waitForUploads=*/true);  // the next iteration runs on W_t
  }

  // Gradients, deepest layer first, as each layer's download lands.
  std::optional<trace::Timeline::Scope> gradSpan(std::in_place, options_.timeline, "take gradients", "optimizer", 1);
  std::vector<bool> started(tensors_.size(), false);
  for (int l = options_.layers - 1; l >= 0; --l) {
    doing(fmt::format("take layer {}'s gradients", l));
    fences_.waitDownloads(l, t + 1);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& tensor = tensors_[i];
      if (!tensor.trainable) continue;
      const auto use = std::find(tensor.layers.begin(), tensor.layers.end(), l);
      if (use == tensor.layers.end()) continue;
      const float* slot = tensor.slots[static_cast<std::size_t>(use - tensor.layers.begin())];
      const auto [begin, end] = slices_[i];
      auto& grad = grads_[i];
      if (!started[i]) {
        std::memcpy(grad.data(), slot + begin, (end - begin) * sizeof(float));
        started[i] = true;
      } else {
        for (std::size_t k = 0; k < grad.size(); ++k) grad[k] += slot[begin + k];
      }
    }
    fences_.setConsumed(l, rank_, t + 1);
  }

  gradSpan.reset();
  if (crossNode_) {
    // Data parallel across nodes: every node's slice holders sum their gradients; each applies the same update.
    doing("all-reduce gradients across nodes");
    for (auto& grad : grads_) {
      if (!grad.empty()) crossNode_->allreduce(grad.data(), grad.size(), control::Reduce::kSum);
    }
  }
  doing("AdamW");
  trace::Timeline::Scope updateSpan(options_.timeline, fmt::format("AdamW step {}", t + 1), "optimizer", 1);
  // The global norm: this rank's slices' sum of squares, summed over the node's ranks.
  std::vector<optim::GradBuffer> buffers;
  for (auto& grad : grads_) buffers.push_back({grad.data(), grad.size()});
  double sumSq = optim::sumOfSquares(buffers);
  node_->allreduce(&sumSq, 1, control::Reduce::kSum);
  result.gradNorm = std::sqrt(sumSq);
  optim::clipToNorm(buffers, result.gradNorm, options_.gradClip);
  result.lr = options_.schedule.at(t);
  adamw_.step(result.lr);
  if (!options_.async) copyMasters(work, /*waitForUploads=*/false);  // the next iteration runs on W_{t+1}

  fences_.waitFusedDone(t + 1);
  const double* losses = options_.losses[t % 2];
  for (int mb = 0; mb < options_.microbatches; ++mb) result.lossSum += losses[mb];
  if (crossNode_) crossNode_->allreduce(&result.lossSum, 1, control::Reduce::kSum);
  result.finished = std::chrono::steady_clock::now();
  return result;
}

std::vector<checkpoint::Slice> OptimizerWorker::stateSlices(bool withWeights) {
  std::vector<checkpoint::Slice> out;
  std::size_t a = 0;  // the tensor's index in adamw_ (trainable tensors, in order)
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    if (!t.trainable) continue;
    const auto [begin, end] = slices_[i];
    const auto offset = static_cast<std::int64_t>(begin), count = static_cast<std::int64_t>(end - begin);
    auto add = [&](checkpoint::Kind kind, float* data) { out.push_back({kind, t.name, t.shape, offset, count, data}); };
    add(checkpoint::Kind::kMaster, t.master + begin);
    if (withWeights) add(checkpoint::Kind::kWeights, t.weights + begin);
    add(checkpoint::Kind::kExpAvg, adamw_.expAvg(a).data());
    add(checkpoint::Kind::kExpAvgSq, adamw_.expAvgSq(a).data());
    if (options_.adamw.amsgrad) add(checkpoint::Kind::kMaxExpAvgSq, adamw_.maxExpAvgSq(a).data());
    ++a;
  }
  return out;
}

void OptimizerWorker::publishMasters() {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& tensor = tensors_[i];
    if (!tensor.trainable) continue;
    const auto [begin, end] = slices_[i];
    std::memcpy(tensor.weights + begin, tensor.master + begin, (end - begin) * sizeof(float));
  }
}

}  // namespace rp::engine
