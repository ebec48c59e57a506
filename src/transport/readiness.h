// Readiness over the control channel, shared by the tensor backends that stage tensors in host memory.
#pragma once

#include "transport/tensor_channel.h"

namespace rp::transport {

class ControlReadiness {
 public:
  ControlReadiness(control::ControlChannel& node, control::StallPolicy stall) : node_(node), stall_(stall) {}
  void signal(int to, const control::StageReady& ready) { control::sendReady(node_, to, ready); }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describePeer) {
    control::waitReady(node_, from, expected, stall_, describePeer);
  }

 private:
  control::ControlChannel& node_;
  control::StallPolicy stall_;
};

}  // namespace rp::transport
