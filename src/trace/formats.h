// The run's files other tools read back (docs/trace-formats.md), each with its one writer and one reader:
// the names of compute spans in the Chrome trace, and profile.json (the measured per-layer times).
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rp::trace {

// A compute span: "<kind> <first>-<last> mb <microbatch> (step <step>)", kind = fwd | fused | bwd, layers
// first..last inclusive, step counted from 1.
struct ComputeSpan {
  std::string kind;
  int first = 0, last = 0, microbatch = 0;
  std::int64_t step = 0;
  bool operator==(const ComputeSpan&) const = default;
};
std::string computeSpanName(const ComputeSpan& span);
// nullopt for any other name.
std::optional<ComputeSpan> parseComputeSpanName(const std::string& name);

// <output.dir>/profile.json: measured milliseconds per microbatch of each layer's forward and of its
// backward (recompute excluded), and the run's last plan (schedule::formatPlan), workers and microbatches.
// Whether a device label (metrics rows' "device": cpu, cuda:<name>, emulated:<profile>) is a modelled device's,
// whose times, rates and memory peaks are its model's (docs/emulated.md).
inline bool modelledDevice(const std::string& label) {
  return label.rfind("emulated:", 0) == 0;
}

struct LayerProfileFile {
  std::vector<double> forwardMs, backwardMs;
  std::string plan;  // empty when absent (a hand-made profile)
  int workers = 0;   // 0 when absent
  std::int64_t microbatches = 0;
  // What the times were taken on (metrics rows' label; empty when absent: a hand-made profile). An emulated
  // device's times are its model's, not measurements (modelled()).
  std::string device;
  bool modelled() const { return modelledDevice(device); }
};
// Errors (SystemError) name the file.
void writeLayerProfile(const std::string& path, const LayerProfileFile& profile);
// forward_ms and backward_ms of equal length are required; errors (InputError) name the file and the field.
LayerProfileFile readLayerProfile(const std::string& path);

}  // namespace rp::trace
