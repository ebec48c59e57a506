// The control plane's transport (docs/protocol.md): tagged point-to-point messages between ranks, behind
// one narrow interface with two implementations — mpi/ (real processes) and inproc/ (threads as ranks, for
// fast tests). Readiness helpers with deadlines are built on it.
// Thread-safety: one channel per rank; a channel is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "common/error.h"
#include "control/messages.h"
#include "control/tags.h"

namespace rp::control {

// A peer did not answer in time or sent something unexpected; the job cannot continue.
class PeerError : public Error {
 public:
  using Error::Error;
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
};

void sendReady(ControlChannel& channel, int to, const StageReady& message);
// Receives the next StageReady from `from` and checks it is `expected`; throws PeerError after
// `timeoutSeconds` without one (appending `describePeer()`, e.g. the peer's last operation), or on a mismatch.
void waitReady(ControlChannel& channel, int from, const StageReady& expected, double timeoutSeconds,
               const std::function<std::string()>& describePeer = {});

}  // namespace rp::control
