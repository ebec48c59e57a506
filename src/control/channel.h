// The control plane's transport (docs/protocol.md): tagged point-to-point messages and the few collectives
// the engine needs, between ranks, behind one narrow interface with two implementations — mpi/ (real
// processes) and inproc/ (threads as ranks, for fast tests of the whole pipeline). Readiness helpers with
// deadlines are built on it.
// Thread-safety: one channel per rank; a channel is used by one thread at a time (a thread of its own gets
// a duplicate()), except that one more thread may send() while the owner uses it: the tensor plane's readiness
// sender (Note [Readiness sender], transport/readiness.h), whose messages the peers' main threads receive on
// this channel. Both implementations allow it (MPI_THREAD_MULTIPLE; the in-process hub's lock).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "control/messages.h"
#include "control/tags.h"

namespace rp::control {

// A peer did not answer in time or sent something unexpected; the job cannot continue.
class PeerError : public Error {
 public:
  using Error::Error;
};

// The stall inspector's two deadlines (docs/protocol.md, "Failure semantics"), for every wait on a peer.
struct StallPolicy {
  double warnSeconds = 60.0;    // pipeline.stall_warn_s: log what is late and the late rank's last operation
  double abortSeconds = 300.0;  // pipeline.stall_timeout_s: then fail with that message
};

enum class Element { kInt32, kInt64, kFloat32, kFloat64 };
enum class Reduce { kSum, kMin, kMax };

// A collective started and not yet finished (ControlChannel::startAllreduce). Its buffer belongs to the
// collective until wait() returns. Destroyed unfinished (a rank unwinding after an error) it is abandoned:
// MPI cannot cancel a collective, and the process is ending.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Lets the collective progress (MPI moves a non-blocking collective only inside its calls); true once done.
  virtual bool test() = 0;
  // Until it is done, bounded as the channel's blocking collectives are (boundCollectives).
  virtual void wait() = 0;
};

class ControlChannel {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  virtual ~ControlChannel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(int to, Tag tag, const void* data, std::size_t bytes) = 0;
  // The next message from `from` with `tag` (messages between a pair on a tag arrive in send order), or
  // false when none arrived before `deadline`.
  virtual bool receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) = 0;

  // Collectives: every rank of the channel calls them, in the same order.
  virtual void barrier() = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // In place; sums add in rank order on inproc (MPI's order is the library's).
  virtual void allreduce(void* data, std::size_t count, Element element, Reduce op) = 0;
  // allreduce, started now and finished by the returned handle's wait(): the optimizer overlaps the cross-node
  // gradient sum with the rest of the backward. Same order rule as the blocking collectives (the start is what
  // counts). The default finishes it before returning (the blocking call); MPI's runs in the background.
  virtual std::unique_ptr<PendingCollective> startAllreduce(void* data, std::size_t count, Element element, Reduce op);
  // In place over `data`, cut into one block per rank (`counts[r]` elements for rank r, in rank order): every
  // rank's blocks are summed (reduced by `op`) and rank r receives block r's result at the START of `data`
  // (MPI's in-place rule); the rest of `data` is then undefined. Started now, finished by the handle's wait()
  // (inproc/ finishes it before returning). The optimizer's gradient exchange with optim.shard_across_nodes.
  virtual std::unique_ptr<PendingCollective> startReduceScatter(void* data, const std::vector<std::size_t>& counts,
                                                                Element element, Reduce op) = 0;
  // In place over `data`, cut into blocks as startReduceScatter's: rank r's block r (at its offset) goes to every
  // rank's block r. Started now, finished by the handle's wait() (inproc/: before returning).
  virtual std::unique_ptr<PendingCollective> startAllgather(void* data, const std::vector<std::size_t>& counts,
                                                            Element element) = 0;
  // Every rank's bytes (sizes may differ), in rank order, on `root`; empty elsewhere.
  virtual std::vector<std::vector<std::uint8_t>> gather(const void* data, std::size_t bytes, int root) = 0;
  // A channel over the same ranks that no other channel's messages or collectives touch (for another thread).
  virtual std::unique_ptr<ControlChannel> duplicate() = 0;
  // The ranks with the same `color`, ordered by (key, rank): a channel of their own.
  virtual std::unique_ptr<ControlChannel> split(int color, int key) = 0;

  template <typename T>
  void allreduce(T* data, std::size_t count, Reduce op) {
    allreduce(data, count, elementOf<T>(), op);
  }

  // Bounds every collective's wait by the stall inspector (waitOrStall): a collective some peer never joins —
  // a cut link, a hung rank — throws PeerError after policy.abortSeconds naming the collective and the
  // channel's other ranks, each as `describe(world rank)` words it. duplicate() and split() keep the bound.
  // Unbounded until called; channels whose ranks are threads of one process (inproc/) cannot lose a peer
  // that way and keep it unused.
  void boundCollectives(const StallPolicy& policy, std::function<std::string(int worldRank)> describe);

 protected:
  struct CollectiveBound {
    StallPolicy policy;
    std::function<std::string(int)> describe;
  };
  std::shared_ptr<const CollectiveBound> bound_;

 private:
  template <typename T>
  static constexpr Element elementOf() {
    if constexpr (std::is_same_v<T, std::int32_t>) return Element::kInt32;
    if constexpr (std::is_same_v<T, std::int64_t>) return Element::kInt64;
    if constexpr (std::is_same_v<T, float>) return Element::kFloat32;
    if constexpr (std::is_same_v<T, double>) return Element::kFloat64;
  }
};

std::size_t elementBytes(Element element);
// A collective that finished before its start returned (channels without background progress).
std::unique_ptr<PendingCollective> finishedCollective();
// `into[i] = op(into[i], from[i])` for `count` elements.
void reduceInto(void* into, const void* from, std::size_t count, Element element, Reduce op);

// Calls `attempt(deadline)` — true once the awaited thing happened, false at `deadline` — until it succeeds.
// After policy.warnSeconds logs one warning "still waiting … for <what()><late()>" (when warnSeconds <
// abortSeconds); after policy.abortSeconds throws PeerError("stalled: waited N s for <what()> …<late()>").
// `late` (optional) describes the late rank, e.g. its last operation from the activity board.
void waitOrStall(const StallPolicy& policy, const std::function<bool(ControlChannel::Deadline)>& attempt,
                 const std::function<std::string()>& what, const std::function<std::string()>& late = {});

void sendReady(ControlChannel& channel, int to, const StageReady& message);
// Receives the next StageReady from `from` and checks it is `expected`, under `policy` (appending
// `describePeer()`, e.g. the peer's last operation, to the warning and the error); a mismatch is a PeerError.
void waitReady(ControlChannel& channel, int from, const StageReady& expected, const StallPolicy& policy,
               const std::function<std::string()>& describePeer = {});

}  // namespace rp::control
