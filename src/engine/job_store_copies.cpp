// The stage-job executor's copies between the node store and the worker's stage slots (job_executor.h;
// docs/schedule.md, "Runtime"): a job's weights in — uploaded as each layer is published, or prefetched while
// the previous job runs — and its gradients out, each layer's at its mark.
#include "engine/job_executor.h"
#include "model/libtorch.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "device/host_waits.h"
#include "engine/regions.h"

namespace rp::engine {

using namespace detail;

std::string JobExecutor::weightsOf(int tensor, std::int64_t step) const {
  const auto& t = model_->tensors()[static_cast<std::size_t>(tensor)];
  return weightRegion(t.name, t.trainable && step >= 0 ? static_cast<int>(step % versions_) : 0);
}

// Upload: the store's weights of every tensor the layers use, into the replica. Note [Layer fences]:
// iteration t reads version t mod V, which the optimizer's copy of step t-V published (sync: W_t after step
// t-1; staleness k >= 1: W_{t-k}, copied before step t-k's update). With V >= 2 iteration t also waits for
// iteration t-2's last gradient download, so at most two iterations are in flight, as the parity-buffered
// tensor plane needs (with V = 1 the copy fence implies it).
//
// Note [Upload as published]: the optimizer publishes the weights layer by layer, the first layer first (sync:
// as each layer is updated, Note [Update by layer]; async: as each layer is copied), so the upload queues each
// layer's tensors as soon as that layer is published rather than after the whole stage is: the copy of layer
// l runs while the optimizer still writes the layers after it, and what the job waits for after the last
// layer's publication is that layer's copy, not the stage's. A tensor goes with the first layer of the range
// that uses it; copied[l] covers every tensor of layer l (the optimizer writes a tensor with its shallowest
// layer, or publishes every layer at once).
void JobExecutor::upload(std::int64_t step, const schedule::Range& layers) {
  torch::NoGradGuard noGrad;
  uploading_ = device::Ticket();
  {
    activity_->set(rank_, 0, fmt::format("upload {}-{} (step {})", layers.begin, layers.end - 1, step + 1));
    trace::Timeline::Scope wait(timeline_, "wait: weights published", "wait", 0);  // queueing does not block
    device::countHostWait(device::HostWait::kReadiness);
    if (versions_ >= 2 && step >= 2) {
      for (int l = 0; l < model_->layerCount(); ++l) fences_->waitDownloads(l, step - 2);
    }
    std::vector<bool> queued(model_->tensors().size(), false);
    fences_->forEachCopiedByAll(layers.begin, layers.end, step - versions_ + 1, [&](int l) {
      for (int i : model_->tensorsOfLayer(l)) {
        if (!queued[static_cast<std::size_t>(i)]) queueWeight(uploading_, i, step);
        queued[static_cast<std::size_t>(i)] = true;
      }
    });
  }
  trace::Timeline::Scope span(timeline_, fmt::format("upload {}-{}", layers.begin, layers.end - 1), "upload", 0);
  uploading_.wait();
  if (step >= 0) {
    for (int l = layers.begin; l < layers.end; ++l) fences_->addUpload(l, step);
  }
}

// Tensor i's weights of iteration `step`, queued as a bulk copy on the worker (behind urgent copies) into its
// place in the slot it is bound to.
void JobExecutor::queueWeight(device::Ticket& ticket, int i, std::int64_t step) {
  if (skipUploads_) return;
  const auto& t = model_->tensors()[static_cast<std::size_t>(i)];
  worker_->copyBulk(ticket, t.local.data_ptr(), store_->bytes(weightsOf(i, step)), model_->bytes(i));
  uploadedBytes_ += model_->bytes(i);
}

// One-stage weight prefetch (Note [Prefetch]): while job k runs, bind this worker's next job in the same
// iteration to the other stage slot and queue its weights, if it uses none of job k's tensors (a tensor is
// bound to one place at a time) and its weights are already published. The job waits for the ticket instead
// of uploading.
void JobExecutor::prefetchNext(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table) {
  const auto& current = table.jobs[static_cast<std::size_t>(k)].layers;
  for (std::size_t next = static_cast<std::size_t>(k) + 1; next < table.jobs.size(); ++next) {
    if (table.jobs[next].worker != rank_) continue;
    const auto& layers = table.jobs[next].layers;
    for (int a = current.begin; a < current.end; ++a) {
      for (int b = layers.begin; b < layers.end; ++b) {
        for (int i : model_->tensorsOfLayer(a)) {
          const auto& other = model_->tensorsOfLayer(b);
          if (std::find(other.begin(), other.end(), i) != other.end()) return;  // shared tensor: no prefetch
        }
      }
    }
    for (int l = layers.begin; l < layers.end; ++l) {
      if (!fences_->copiedByAll(l, step - versions_ + 1)) return;
    }
    prefetch_ = Prefetch{step, static_cast<std::int64_t>(next), device::Ticket()};
    slots_->bind(*model_, layers, 1 - slot_);
    for (int i : model_->tensorsOf(layers.begin, layers.end)) queueWeight(prefetch_->ticket, i, step);
    return;
  }
}

// Download: each trainable tensor's accumulated gradient into the slot of its first user in this job (a
// tensor used twice within one job has one gradient for both uses; the other slot gets zeros).
// Note [Layer fences]: iteration t writes version t mod V of the slots, only after the optimizer took
// iteration t-V's gradients out of it.
void JobExecutor::download(std::int64_t step, const schedule::Range& layers, const GradientMarks* marks) {
  torch::NoGradGuard noGrad;
  {
    activity_->set(rank_, 0, fmt::format("download {}-{} (step {})", layers.begin, layers.end - 1, step + 1));
    trace::Timeline::Scope wait(timeline_, "wait: gradients taken", "wait", 0);
    device::countHostWait(device::HostWait::kReadiness);
    for (int l = layers.begin; l < layers.end; ++l) fences_->waitConsumedByAll(l, step - versions_ + 1);
  }
  trace::Timeline::Scope span(timeline_, fmt::format("download {}-{}", layers.begin, layers.end - 1), "download", 0);
  // Which slot each trainable tensor's gradient goes to: its first user's in this job; a later use of the same
  // tensor gets zeros. Deepest layer first — the order the optimizer takes them in — each layer's fence moving
  // as soon as its copies have landed, not when the whole stage's have. The copies wait on the device for the
  // backward that wrote the gradients (Worker::copyUrgent's ordering, or copyUrgentAfter a layer's mark), so
  // the host does not.
  const std::vector<int> owner = gradientOwners(layers);
  const auto onWorker = worker_->enterCompute();
  std::vector<torch::Tensor> sources;  // alive until their copies completed
  std::vector<std::vector<device::Ticket>> copies(static_cast<std::size_t>(layers.end - layers.begin));
  for (int l = layers.end - 1; l >= layers.begin; --l) {
    const std::shared_ptr<device::ComputeMark> mark = marks ? marks->of(l) : nullptr;
    for (int i : model_->tensorsOfLayer(l)) {
      const auto& t = model_->tensors()[static_cast<std::size_t>(i)];
      if (!t.trainable) continue;
      std::uint8_t* slot = store_->bytes(gradRegion(t.name, l, static_cast<int>(step % versions_)));
      if (owner[static_cast<std::size_t>(i)] != l || !t.local.grad().defined()) {
        std::memset(slot, 0, model_->bytes(i));
        continue;
      }
      const torch::Tensor& grad = t.local.grad();
      sources.push_back(grad.contiguous());
      const auto bytes = static_cast<std::size_t>(sources.back().nbytes());
      // A gradient made contiguous here was copied after the mark: it waits for all the compute.
      copies[static_cast<std::size_t>(l - layers.begin)].push_back(
          mark && grad.is_contiguous() ? worker_->copyUrgentAfter(slot, sources.back().data_ptr(), bytes, *mark)
                                       : worker_->copyUrgent(slot, sources.back().data_ptr(), bytes));
    }
  }
  for (int l = layers.end - 1; l >= layers.begin; --l) {
    for (const auto& copy : copies[static_cast<std::size_t>(l - layers.begin)]) copy.wait();
    fences_->addDownload(l, step);
  }
  for (std::size_t i = 0; i < owner.size(); ++i) {
    auto local = model_->tensors()[i].local;
    if (owner[i] >= 0 && local.grad().defined()) local.mutable_grad().reset();
  }
}

std::unique_ptr<GradientMarks> JobExecutor::gradientMarks(const schedule::Range& layers) {
  std::map<int, std::vector<torch::Tensor>> owned;
  const std::vector<int> owner = gradientOwners(layers);
  for (std::size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] >= 0) owned[owner[i]].push_back(model_->tensors()[i].local);
  }
  return std::make_unique<GradientMarks>(owned, [this] { return worker_->mark(); });
}

std::vector<int> JobExecutor::gradientOwners(const schedule::Range& layers) const {
  std::vector<int> owner(model_->tensors().size(), -1);
  for (int l = layers.end - 1; l >= layers.begin; --l) {  // the shallowest user wins
    for (int i : model_->tensorsOfLayer(l)) {
      if (model_->tensors()[static_cast<std::size_t>(i)].trainable) owner[static_cast<std::size_t>(i)] = l;
    }
  }
  return owner;
}

}  // namespace rp::engine
