#include "engine/parts.h"

#include "control/mpi/mpi_channel.h"

namespace rp::engine {

RuntimeParts mpiParts(const MpiSession& session, config::TensorChannelKind channel) {
  RuntimeParts parts;
  parts.identity = session.identity();
  parts.node = std::make_unique<control::MpiChannel>(session.node());
  parts.world = std::make_unique<control::MpiChannel>(session.world());
  parts.nodeMemory = memory::mapSharedMemory;
  parts.tensors =
      channel == config::TensorChannelKind::kDirect ? transport::TensorChannelFactory(transport::deviceDirect)
      : channel == config::TensorChannelKind::kNccl ? transport::TensorChannelFactory(transport::peerLinks)
                                                    : transport::TensorChannelFactory(transport::hostStaged);
  return parts;
}

}  // namespace rp::engine
