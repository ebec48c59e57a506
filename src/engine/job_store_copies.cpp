// The stage-job executor's copies between the node store and the worker's stage slots (job_executor.h;
// docs/schedule.md, "Runtime"): a job's weights in — uploaded as each layer is published, or prefetched while
// the previous job runs — and its gradients out, each layer's at its mark.
#include "engine/job_executor.h"
#include "model/libtorch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
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
        if (!queued[static_cast<std::size_t>(i)]) {
          queueWeight(uploading_, i, step, model_->tensors()[static_cast<std::size_t>(i)].local.data_ptr(), slot_);
        }
        queued[static_cast<std::size_t>(i)] = true;
      }
    });
  }
  trace::Timeline::Scope span(timeline_, fmt::format("upload {}-{}", layers.begin, layers.end - 1), "upload", 0);
  if (mutation_ != TestMutation::kWeightsNotAwaited) uploading_.wait();  // a test mutation computes without them
  if (step >= 0) {
    for (int l = layers.begin; l < layers.end; ++l) fences_->addUpload(l, step);
  }
}

// Tensor i's weights of iteration `step`, queued as a bulk copy on the worker (behind urgent copies) into its
// place in a stage slot.
void JobExecutor::queueWeight(device::Ticket& ticket, int i, std::int64_t step, void* dst, int slot) {
  if (skipUploads_) return;
  // A test mutation orders it after the mark of the job before the slot's last (Note [Device sanitizer]).
  worker_->copyBulk(ticket, dst, store_->bytes(weightsOf(i, step)), model_->bytes(i),
                    mutation_ == TestMutation::kWeightCopyPreviousMark ? releasedBefore_ : slots_->releasedAfter(slot));
  if (emulated_.active()) {
    worker_->declareCopy({{},
                          {{device::Region::Kind::kSlot, slot}},
                          fmt::format("weights of {} for step {} into slot {}",
                                      model_->tensors()[static_cast<std::size_t>(i)].name, step + 1, slot)});
  }
  uploadedBytes_ += model_->bytes(i);
}

// Note [Prefetch]: while job k runs, the weights of this worker's next job go into the other stage slot, queued
// once they are published (checked as the job starts and after each of its microbatches), so the next job
// finds them there instead of uploading. The copies go to the places the job will bind its tensors to
// (StageSlots::places) and the job binds them when it starts: the tensors may be the running job's too (a
// tied embedding, the same stage in the next iteration). One stage ahead, one prefetch at a time.
//
// Note [Prefetch across iterations]: after a worker's last job of iteration t comes its first of t + 1, in the
// table the coordinator will send unless the plan changes (round-robin: dispatch() from this table's counter;
// gpipe: the same table; not known ahead under earliest_finish). Its weights are published during iteration
// t in async mode — W_{t+1-k} — once step t-k's update is done (Note [Copy as the iteration starts]), so they
// reach the worker while iteration t computes: with one stage (one fused job a step, as on an 80 GB card) its
// upload is no longer exposed between the iterations. In sync mode W_{t+1} needs iteration t's gradients, so
// there is nothing to prefetch before the iteration ends. A guess the next table does not confirm (a new
// plan, another dispatch) is dropped as the job starts: its ticket awaited, its bytes ignored.
void JobExecutor::prefetchNext(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table,
                               const schedule::DispatchTable* next) {
  awaited_.reset();
  const auto firstOf = [&](const schedule::DispatchTable& in, std::size_t from, std::int64_t at) {
    for (std::size_t j = from; j < in.jobs.size() && !awaited_; ++j) {
      if (in.jobs[j].worker == rank_) awaited_ = NextJob{at, static_cast<std::int64_t>(j), in.jobs[j].layers};
    }
  };
  firstOf(table, static_cast<std::size_t>(k) + 1, step);
  if (next != nullptr) firstOf(*next, 0, step + 1);
  tryPrefetch();
}

void JobExecutor::tryPrefetch() {
  if (!awaited_ || prefetch_ || !publishedFor(awaited_->step, awaited_->layers)) return;
  prefetch_ = Prefetch{*awaited_, 1 - slot_, device::Ticket()};
  awaited_.reset();
  const schedule::Range& layers = prefetch_->of.layers;
  const std::vector<std::uint8_t*> places = slots_->places(*model_, layers, prefetch_->slot);
  const std::vector<int> tensors = model_->tensorsOf(layers.begin, layers.end);
  for (std::size_t j = 0; j < tensors.size(); ++j) {
    queueWeight(prefetch_->ticket, tensors[j], prefetch_->of.step, places[j], prefetch_->slot);
  }
}

// Note [Prefetch while the device computes]: a job's gradient downloads land only when the device has computed
// its last microbatch's backward, and the host, which submitted that compute long before (stream-ordered jobs),
// waits for them at the job's end — the longest wait of a fused or backward job on a GPU. The next job's
// weights may be published meanwhile (async: the copy of the next iteration's weights runs while this one
// computes, Note [Copy as the iteration starts]); a prefetch tried only after each microbatch was submitted
// would miss them, and the next job would upload them after this one ends, its compute waiting. So the wait
// tries the prefetch every 100 µs until it is issued; the copy, ordered only after the job that last used the
// other slot (Note [Slot release]), runs while this job still computes. On the CPU the compute is done when
// the host gets here and the downloads are too: nothing changes (the waiting itself is Ticket::wait's, tested
// with a completion from another thread: Ticket.AWaitRunsItsMeanwhileUntilItReturnsFalseOrTheTicketCompletes).
void JobExecutor::waitPrefetching(const device::Ticket& copy) {
  if (!awaited_ || prefetch_) return copy.wait();
  copy.wait([this] { return tryPrefetchMeanwhile(); }, std::chrono::microseconds(100));
}

// Note [Prefetch while waiting for the directive]: after its last job of an iteration (or in an iteration
// without a job for it: fewer jobs than workers) a rank other than 0 waits for rank 0's next directive, and
// the weights of its next job — W_t in async mode, published while iteration t still runs — may be published
// meanwhile. Coordination::begin tries the prefetch as that wait starts and every millisecond of it, so the job
// that follows finds them in its slot instead of uploading as it starts. A guess the directive does not confirm
// is dropped as the job starts, as any other (Note [Prefetch across iterations]).
bool JobExecutor::tryPrefetchMeanwhile() {
  if (prefetch_) return false;
  tryPrefetch();
  return awaited_.has_value();
}

bool JobExecutor::publishedFor(std::int64_t step, const schedule::Range& layers) const {
  if (versions_ >= 2 && step >= 2) {
    for (int l = 0; l < model_->layerCount(); ++l) {
      if (!fences_->downloaded(l, step - 2)) return false;
    }
  }
  for (int l = layers.begin; l < layers.end; ++l) {
    if (!fences_->copiedByAll(l, step - versions_ + 1)) return false;
  }
  return true;
}

// Note [Hold for prefetch] (testing, RP_HOLD_FOR_PREFETCH=1): whether a prefetch happens depends on who is ahead —
// the optimizer publishing the next job's weights, or the job (or the wait for the directive) ending before
// that — and on a loaded machine either may be. The hold takes that race out of the prefetch tests: the last
// microbatch of a job, and a rank's wait for rank 0's directive, wait first until the weights of the worker's
// next job are published, then the code they run anyway (tryPrefetch after the microbatch, the directive wait's
// meanwhile) issues the prefetch. Only where the weights need no gradient of iteration `from` or later, since
// those come after the hold: the newest gradients iteration s's weights wait for are iteration s - 1's in sync
// mode (W_s), s - 2's in async (the copy of W_{s-k} after step s-k-1's update, and with V >= 2 iteration s-2's
// downloads: Note [Layer fences]). Bounded: weights still unpublished after a minute fail the rank naming them
// (a missing publication, not a slow one).
void JobExecutor::holdForPrefetch(std::int64_t from) const {
  if (!holdForPrefetch_ || !awaited_ || prefetch_) return;
  const std::int64_t newestGradients = awaited_->step - (config_.optim.async() ? 2 : 1);
  if (newestGradients >= from) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!publishedFor(awaited_->step, awaited_->layers)) {
    if (std::chrono::steady_clock::now() > deadline) {
      RP_THROW(InternalError, "RP_HOLD_FOR_PREFETCH: rank {}'s weights of layers {}-{} for step {} were not published "
               "within a minute", worldRank_, awaited_->layers.begin, awaited_->layers.end - 1, awaited_->step + 1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void JobExecutor::dropPrefetch() {
  awaited_.reset();
  if (!prefetch_) return;
  prefetch_->ticket.wait();
  prefetch_.reset();
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
      if (emulated_.active()) {  // Note [Device sanitizer]
        worker_->declareCopy({{{device::Region::Kind::kGradient, l}},
                              {},
                              fmt::format("download of {}'s gradient (layer {}) of step {}", t.name, l, step + 1)});
      }
    }
  }
  for (int l = layers.end - 1; l >= layers.begin; --l) {
    for (const auto& copy : copies[static_cast<std::size_t>(l - layers.begin)]) waitPrefetching(copy);
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
