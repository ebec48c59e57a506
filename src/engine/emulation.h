// The engine's side of the emulated device (docs/emulated.md; Note [Emulated device] in
// device/emulated/emulated_worker.cpp): the GPU a run emulates, from the simulator's hardware files, and the
// compute the stage jobs submit to it, from the FLOP model the planner and the MFU line use.
#pragma once

#include <string>

#include "config/run_config.h"
#include "device/worker.h"
#include "engine/costs.h"

namespace rp::engine {

// pipeline.emulated_profile: a path to a .toml, or the name of one in cluster-configs/ (looked up in the
// working directory, then beside the executable's source tree). An InputError names the key, the places
// looked in and the profiles there.
std::string emulatedProfilePath(const config::RunConfig& config);
// The GPU of that profile: its tensor peak x its matmul efficiency, its share of the host bridge
// (pcie_gbps / gpus_per_host_bridge, as the simulator counts it), its memory, its per-kernel floor.
device::EmulatedDevice emulatedDevice(const config::RunConfig& config);

// What each layer's compute costs the emulated device per microbatch, from the planner's FLOP estimates
// (`costs.layers.forward`, GFLOP): a forward, and a backward (twice the forward: activation and weight
// gradients); the head's loss computes its gradients in the forward (model/linear_cross_entropy.h), so its
// forward with gradients costs three forwards and its backward nothing. Kernels: what our layers launch, counted
// from model/layers.cpp (the floor each adds is the profile's).
class EmulatedCompute {
 public:
  // Active on a device that models its compute: then LibTorch's meta tensors are counted against that device's
  // memory while this lives (Note [Emulated compute memory]).
  EmulatedCompute(device::Worker& worker, const LayerCosts& costs, int layers);
  ~EmulatedCompute();
  EmulatedCompute(const EmulatedCompute&) = delete;
  EmulatedCompute& operator=(const EmulatedCompute&) = delete;
  bool active() const { return active_; }
  void forward(int layer, bool withGradients) const;
  void backward(int layer) const;

 private:
  device::Worker& worker_;
  const LayerCosts& costs_;
  int layers_;
  bool active_;
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
