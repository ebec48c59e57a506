#include "engine/parts.h"

#include "control/mpi/mpi_channel.h"

namespace rp::engine {

RuntimeParts mpiParts(const MpiSession& session) {
  RuntimeParts parts;
  parts.identity = session.identity();
  parts.node = std::make_unique<control::MpiChannel>(session.node());
  parts.world = std::make_unique<control::MpiChannel>(session.world());
  parts.nodeMemory = memory::mapSharedMemory;
  parts.tensors = transport::hostStaged;
  return parts;
}

}  // namespace rp::engine
