// The pipeline runtime with threads as ranks: inproc channels, the node store on a plain buffer, a chosen
// tensor-plane backend. Shared by the in-process tier (tests/unit/test_pipeline_inproc.cpp) and the GPU tier
// (tests/gpu/test_gpu_pipeline.cpp).
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "model/libtorch.h"
#include "trace/metrics.h"

namespace rp::test {

enum class TensorPlane { kHostStaged, kInProcess, kDirect, kPeerLinks };  // the tensor-plane backend under test
inline const char* planeName(TensorPlane plane) {
  switch (plane) {
    case TensorPlane::kHostStaged:
      return "host_staged";
    case TensorPlane::kInProcess:
      return "inproc_tensors";
    case TensorPlane::kDirect:
      return "device_direct";
    case TensorPlane::kPeerLinks:
      return "peer_links";
  }
  return "?";
}
inline void PrintTo(TensorPlane plane, std::ostream* os) {
  *os << planeName(plane);
}

struct ThreadRun {
  std::vector<trace::StepMetrics> metrics;       // rank 0's
  std::map<std::string, torch::Tensor> weights;  // rank 0's view of the final store, by name
  std::vector<std::string> errors;               // "rank r: what()" of every rank that threw
};

// Runs `config` on `workers` threads as ranks (one node); unless `failing`, a rank's error fails the test
// (after every thread ended). `names`: the weights to read back.
ThreadRun runOnThreads(const config::RunConfig& config, int workers, TensorPlane plane,
                       const std::vector<std::string>& names, bool failing = false);

}  // namespace rp::test
