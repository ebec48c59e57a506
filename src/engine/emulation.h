// The engine's side of the emulated device (docs/emulated.md; Note [Emulated device] in
// device/emulated/emulated_worker.cpp): the GPU a run emulates, from the simulator's hardware files, and the
// compute the stage jobs submit to it, from the FLOP model the planner and the MFU line use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "config/run_config.h"
#include "device/worker.h"
#include "engine/kernel_count.h"
#include "engine/pipeline_model.h"
#include "schedule/projection.h"

namespace rp::engine {

// pipeline.emulated_profile: a path to a .toml, or the name of one in cluster-configs/ (looked up in the
// working directory, then beside the executable's source tree). An InputError names the key, the places
// looked in and the profiles there.
std::string emulatedProfilePath(const config::RunConfig& config);
// The GPU of that profile: its tensor peak x its matmul efficiency, its share of the host bridge
// (pcie_gbps / gpus_per_host_bridge, as the simulator counts it), its memory, its per-kernel floor.
device::EmulatedDevice emulatedDevice(const config::RunConfig& config);

// What each layer's compute costs the emulated device per microbatch: the one FLOP model (Note [One FLOP model],
// schedule/projection.h), which the simulator's projections take too, on the microbatch's own documents (its
// attention per document, as the varlen kernel runs them; a sliding layer's within its window) and, with a LoRA
// base, without the frozen weights' gradients. A decoder layer's forward, its backward (submitted as autograd
// reaches the layer's output); the head's loss computes its gradients in the forward (model/linear_cross_entropy.h),
// so its forward with gradients costs its forward and backward, and its backward nothing. Kernels: what each
// layer's forward and backward launch, counted from the ops the meta dispatch runs at their first run (Note
// [Kernel counts]); the floor each adds is the profile's.
class EmulatedCompute {
 public:
  // Active on a device that models its compute: then LibTorch's meta tensors are counted against that device's
  // memory while this lives (Note [Emulated compute memory]).
  EmulatedCompute(device::Worker& worker, const PipelineModel& model);
  ~EmulatedCompute();
  EmulatedCompute(const EmulatedCompute&) = delete;
  EmulatedCompute& operator=(const EmulatedCompute&) = delete;
  bool active() const { return active_; }
  // Note [Device sanitizer]: what the computes submitted next read — the job's stage slot — and who they are, for
  // the device's checks; a fetched input the next compute reads.
  void at(int slot, std::string job);
  void microbatch(int mb) { microbatch_ = mb; }
  void willRead(const device::Region& input) { inputs_.push_back(input); }
  void forward(int layer, const model::AttentionContext& context, bool withGradients);
  // Layer `layer`'s backward on the microbatch of `context`, to submit when autograd reaches it, with what it
  // touches.
  struct Backward {
    int layer = 0;
    bool accumulates = false;  // not its job's first microbatch
    double flops = 0;
    device::Access access;
  };
  Backward backwardWork(int layer, const model::AttentionContext& context) const;
  void backward(const Backward& backward);
  // Note [Kernel counts per layer]: the compute submitted last has run all its ops (a backward pass returned, a job
  // ended).
  void settle();

 private:
  // Note [Kernel counts per layer]: a layer's forward, its forward with the head's gradients, or its backward; on a
  // job's first microbatch or a later one (whose weight gradients accumulate).
  enum class Phase : std::uint8_t { kForward, kForwardWithGradients, kBackward };
  struct Counted {
    int layer;
    Phase phase;
    bool accumulates;
    bool operator<(const Counted& o) const {
      return std::tie(layer, phase, accumulates) < std::tie(o.layer, o.phase, o.accumulates);
    }
  };
  double pairs(int layer, const model::AttentionContext& context) const;
  // Submits the compute of `counted` with what it touches; its kernels as counted at its first run, which is
  // counted now and charged no floor.
  void submit(Counted counted, double flops, device::Access access);

  device::Worker& worker_;
  const schedule::ModelShape shape_;
  bool frozen_;
  int layers_;
  bool active_;
  int slot_ = 0, microbatch_ = 0;
  std::string job_;
  std::map<Counted, int> kernels_;   // counted at each one's first run
  std::optional<Counted> counting_;  // the compute submitted last, being counted
  std::unique_ptr<KernelCount> count_;
  std::vector<device::Region> inputs_;  // fetched for the next compute
};

// While alive, the meta tensors this thread creates are not counted as the emulated device's compute memory: the
// stage's weights bound to meta tensors live in the stage slots, which are counted already (PipelineModel::bind).
class UncountedMeta {
 public:
  UncountedMeta();
  ~UncountedMeta();
  UncountedMeta(const UncountedMeta&) = delete;
  UncountedMeta& operator=(const UncountedMeta&) = delete;

 private:
  bool previous_;
};

}  // namespace rp::engine
