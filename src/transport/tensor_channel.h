// The tensor plane (docs/protocol.md, "Tensor plane"): activations and activation gradients between the stage
// jobs of one node's pipeline, apart from the control plane. A tensor is named by (step, layer, microbatch,
// kind) — the input of `layer`, or the loss's gradient with respect to it — and, once put, any job ordered
// after the put may get it (the next job, and the backward job that recomputes from a saved stage input).
// Readiness (job k of a step has put what microbatch m hands on) orders puts and gets across workers.
// A put names its readers: the next job's worker (a hand-off, read once by that job) and/or any later job (a
// saved stage input, read by the backward job that recomputes from it); a get names the writer of a hand-off.
// Backends, one folder each: host/ (host-staged: a node-shared arena + readiness on the control channel),
// direct/ (device-direct: hand-offs through the producer's device ring, saved tensors in the host arena),
// peer/ (hand-offs over the workers' peer links, NCCL on GPUs) and inproc/ (threads as ranks: a shared map
// that checks every get against its put's readers).
// Thread-safety: one channel per rank, used by its main thread (and its readiness sender's thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "control/channel.h"
#include "device/worker.h"
#include "memory/node_store.h"

namespace rp::transport {

enum class TensorKind { kActivation, kGradient };

struct TensorId {
  std::int64_t step = 0;
  int layer = 0;  // 1..L-1: the input of this layer (the output of layer - 1)
  int microbatch = 0;
  TensorKind kind = TensorKind::kActivation;
};

// Who reads a put tensor.
struct Readers {
  int next = -1;       // the rank of the next job's worker, which reads it once (-1: none)
  bool saved = false;  // any later job of the iteration may read it (a checkpointed stage input)
};
inline constexpr int kSaved = -1;  // get: the tensor was put with `saved`

class TensorChannel {
 public:
  virtual ~TensorChannel() = default;
  // Makes `bytes` of worker memory at `src` tensor `id` for `readers`, after the compute submitted so far.
  // Returns the copy's completion: `src` stays as it is until it is done, and another rank learns of the tensor
  // only then (signal's `after`); a later get of it on this rank waits for it first (the caller's part).
  virtual device::Ticket put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) = 0;
  // Copies tensor `id` — the hand-off `writer` put for this rank, or a saved tensor (kSaved) — into worker
  // memory at `dst` (ahead of queued weight copies). Returns the copy's completion, which the compute that
  // reads `dst` is ordered after (Worker::computeAfter) rather than the host waiting for it.
  virtual device::Ticket get(const TensorId& id, void* dst, std::size_t bytes, int writer) = 0;
  // Tells `to` (the next job's worker) that `ready.job` has put everything microbatch `ready.microbatch`
  // hands on, once the copies of `after` (those puts) are done; messages go in the order signalled. Never
  // blocks, neither on the peer nor on the copies: a rank's sender thread sends what waits on copies
  // (Note [Readiness sender], readiness.h).
  virtual void signal(int to, const control::StageReady& ready, std::vector<device::Ticket> after = {}) = 0;
  // Waits for `expected` from `from` under the stall policy (a PeerError naming the peer, with describePeer()).
  virtual void await(int from, const control::StageReady& expected,
                     const std::function<std::string()>& describePeer) = 0;
};

// What a backend is built from, at the same point on every rank of the node (collective over `node`).
struct TensorChannelContext {
  control::ControlChannel& node;  // readiness messages; collectives to set up
  device::Worker& worker;         // copies between worker and host memory
  memory::NodeMemoryFactory nodeMemory;
  control::StallPolicy stall;
  int layers = 0;  // L: tensors exist for layers 1..L-1
  int microbatches = 0;
  std::size_t tensorBytes = 0;  // of every activation and activation gradient
};

using TensorChannelFactory = std::function<std::unique_ptr<TensorChannel>(const TensorChannelContext&)>;

// The backends, one line each (defined in their folders). hostStaged: every rank of a node, processes or
// threads. deviceDirect: the same, with hand-offs in worker memory (docs/protocol.md, "Device-direct").
// peerLinks: hand-offs over the workers' peer links (NCCL between GPUs; CPU workers: threads as ranks only).
// inProcess: threads as ranks only; the ranks that share `hub` share its tensors.
std::unique_ptr<TensorChannel> hostStaged(const TensorChannelContext& context);
std::unique_ptr<TensorChannel> deviceDirect(const TensorChannelContext& context);
std::unique_ptr<TensorChannel> peerLinks(const TensorChannelContext& context);
// The worker memory deviceDirect's ring, or peerLinks' send slots, take on each rank (the memory rule counts
// it): 4 slots per microbatch (Note [Hand-off slots]).
std::size_t handOffSlotBytes(int microbatches, std::size_t tensorBytes);
class InProcTensorHub;
TensorChannelFactory inProcess(std::shared_ptr<InProcTensorHub> hub);
std::shared_ptr<InProcTensorHub> newInProcTensorHub();

}  // namespace rp::transport
