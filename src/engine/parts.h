// What a pipeline runtime runs on, injected by whoever builds it: its place in the job, its channels, how its
// node shares memory and how tensors travel between its stage jobs. mpiParts() builds them for one process per rank
// under mpirun; threads as ranks (the in-process tests) build them from inproc channels and shareInProcess.
#pragma once

#include <memory>

#include "config/run_config.h"
#include "control/channel.h"
#include "memory/node_store.h"
#include "transport/tensor_channel.h"
#include "world/mpi_session.h"

namespace rp::engine {

struct RuntimeParts {
  WorldIdentity identity;
  std::unique_ptr<control::ControlChannel> node;   // the node's ranks (the workers of one pipeline), by local rank
  std::unique_ptr<control::ControlChannel> world;  // every rank, by world rank
  memory::NodeMemoryFactory nodeMemory;
  transport::TensorChannelFactory tensors;  // activations and their gradients between stage jobs
};

// Channels on the session's node and world communicators; POSIX shared memory for the node store; the tensor
// plane `channel` names (pipeline.tensor_channel).
RuntimeParts mpiParts(const MpiSession& session, config::TensorChannelKind channel);

}  // namespace rp::engine
