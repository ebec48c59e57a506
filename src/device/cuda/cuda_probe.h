// CUDA device discovery and a self-test kernel. Torch-free; compiled by nvcc.
#pragma once

#include <string>

namespace rp::device::cuda {

struct ProbeResult {
  int count = 0;
  std::string error;  // empty when the runtime answered
};

ProbeResult probeDevices();
std::string selfTest(int index);

}  // namespace rp::device::cuda
