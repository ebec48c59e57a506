// Readiness over the control channel, shared by the tensor backends (docs/protocol.md, "Tensor plane").
//
// Note [Readiness sender]: a microbatch's readiness message may go to the next job's worker only once the
// copies that put its tensors have landed, and the thread that issues the stage jobs must not wait for them —
// on a GPU that wait would drain the device of the next microbatch's work. So signal() sends at once only when
// nothing is queued and its copies are done (always on the CPU, whose copies are inline); otherwise the message
// joins a queue that a sender thread of the rank's own works through in order — waiting for each message's
// copies, then sending it — so a peer receives a rank's messages in the order they were signalled. The sender
// thread sends on the node channel while the main thread uses it (control/channel.h allows one such sender). A
// copy that fails stops the sender; the error is rethrown by the next signal() or await() on the main thread,
// and the peers learn of the failure as of any other (docs/protocol.md, "Failure semantics"). Destruction sends
// what is queued first: a peer may be waiting for it.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/tensor_channel.h"

namespace rp::transport {

class ControlReadiness {
 public:
  ControlReadiness(control::ControlChannel& node, control::StallPolicy stall) : node_(node), stall_(stall) {}
  ~ControlReadiness();
  ControlReadiness(const ControlReadiness&) = delete;
  ControlReadiness& operator=(const ControlReadiness&) = delete;

  void signal(int to, const control::StageReady& ready, std::vector<device::Ticket> after);
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describePeer);

 private:
  struct Message {
    int to;
    control::StageReady ready;
    std::vector<device::Ticket> after;
  };
  void send(const Message& message);  // its copies are done
  void run();                         // the sender thread
  void throwIfFailed();

  control::ControlChannel& node_;
  control::StallPolicy stall_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Message> queue_;  // the front is being sent while it is there
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread sender_;  // started with the first message that must wait
};

}  // namespace rp::transport
