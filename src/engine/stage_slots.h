// Note [Stage slots]: a worker holds no model of its own, only the stages it runs (RoundPipe's stateless
// workers): two slots of worker memory — the running stage's and the prefetched one's — each as large as the
// plan's largest stage (its distinct tensors in the model dtype, 64-byte aligned). A job binds the tensors of
// its layers to views of one slot and uploads the store's weights into them; the next job of the worker
// takes the other slot, so its weights can arrive while this one computes. Re-planning re-sizes the slots.
// Gradients and activations are the compute's own (LibTorch's allocator), freed after each job; with
// pipeline.memory_limit_gb the allocator may hold only what the limit leaves beside the two slots, so a run that
// fits the limit here fits a card of that size, and one that does not fails as out of memory.
//
// Note [Slot release]: on a device whose compute runs behind the host (CUDA), a copy into a slot must wait for
// the compute that still reads it — the last job bound to that slot — and for nothing later: the weights of
// job k+1 go into the slot job k-1 used, so they may land while job k computes in the other one. Each job ends
// by recording a mark of the worker in its slot (release); copies into the slot are ordered after that mark
// (Worker::copyBulk's `after`). A slot no job has computed in since it was allocated has none, nor has one a job
// is computing in (cleared as the job starts, so a job that fails leaves none), and a copy into it waits for
// the compute submitted so far, as every copy did before.
// Thread-safety: the rank's main thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/worker.h"
#include "engine/pipeline_model.h"
#include "schedule/plan.h"

namespace rp::engine {

// The torch device of a worker's tensors.
torch::Device torchDevice(const device::Placement& placement);

class StageSlots {
 public:
  // `budget`: bytes of worker memory per worker (0 = unlimited); both slots must fit in it. `capped`: the compute
  // may hold no more than the budget leaves beside the slots (pipeline.memory_limit_gb, enforced).
  StageSlots(device::Worker& worker, double budget = 0, bool capped = false)
      : worker_(worker), budget_(budget), capped_(capped) {}

  // The bytes a stage over `layers` binds.
  static std::size_t stageBytes(const PipelineModel& model, const schedule::Range& layers);
  // The largest stage of `plan` (in stageBytes).
  static schedule::Range largestStage(const PipelineModel& model, const schedule::Plan& plan);
  // Makes each slot hold `plan`'s largest stage, allocating anew (and unbinding every tensor) when that size
  // changed. Between jobs only. An InputError naming the largest stage when two slots exceed the budget.
  void fit(PipelineModel& model, const schedule::Plan& plan);
  // Binds the tensors of `layers` to views of slot `slot` (0 or 1): each at its place (below).
  void bind(PipelineModel& model, const schedule::Range& layers, int slot);
  // Where bind() puts each tensor of `layers` in slot `slot`, in model.tensorsOf order: a prefetch copies the
  // weights there before the job binds them (Note [Prefetch across iterations]).
  std::vector<std::uint8_t*> places(const PipelineModel& model, const schedule::Range& layers, int slot) const;
  std::size_t slotBytes() const { return bytes_; }
  // Note [Slot release]: `mark` follows the last compute of the job bound to `slot`; releasedAfter() is the
  // latest such mark since the slots were allocated, or null.
  void release(int slot, std::shared_ptr<device::ComputeMark> mark);
  std::shared_ptr<device::ComputeMark> releasedAfter(int slot) const;
  // Testing (Note [Device sanitizer]): a release is ignored while the slot holds an earlier mark, so copies into it
  // follow its first job's end only.
  void keepFirstReleaseMark() { keepFirstMark_ = true; }

 private:
  device::Worker& worker_;
  double budget_;
  bool capped_;
  std::size_t bytes_ = 0;
  std::shared_ptr<void> slots_[2];
  std::shared_ptr<device::ComputeMark> released_[2];
  bool keepFirstMark_ = false;
};

}  // namespace rp::engine
