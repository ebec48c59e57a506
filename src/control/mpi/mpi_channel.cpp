#include "control/mpi/mpi_channel.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/backoff.h"
#include "world/mpi_session.h"

namespace rp::control {
namespace {

MPI_Datatype mpiType(Element element) {
  switch (element) {
    case Element::kInt32:
      return MPI_INT32_T;
    case Element::kInt64:
      return MPI_INT64_T;
    case Element::kFloat32:
      return MPI_FLOAT;
    case Element::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

MPI_Op mpiOp(Reduce op) {
  switch (op) {
    case Reduce::kSum:
      return MPI_SUM;
    case Reduce::kMin:
      return MPI_MIN;
    case Reduce::kMax:
      return MPI_MAX;
  }
  return MPI_SUM;
}

// Calls `ready` until it returns true (true) or `deadline` passes (false), pausing between (Note [Polling backoff]).
template <typename Ready>
bool pollUntil(ControlChannel::Deadline deadline, Ready&& ready) {
  Backoff backoff(std::chrono::microseconds(100));
  while (true) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    backoff.pause();
  }
}

// Polls `request` until it completes (true) or `deadline` passes (false; the request stays pending).
bool testUntil(MPI_Request& request, ControlChannel::Deadline deadline) {
  return pollUntil(deadline, [&] {
    int done = 0;
    checkMpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(control)");
    return done != 0;
  });
}

}  // namespace

MpiChannel::MpiChannel(MPI_Comm comm) : comm_(comm) {
  checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank(control)");
  checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size(control)");
}

MpiChannel::MpiChannel(MPI_Comm comm, Owned) : MpiChannel(comm) {
  owned_ = true;
}

MpiChannel::~MpiChannel() {
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiChannel::send(int to, Tag tag, const void* data, std::size_t bytes) {
  checkMpi(MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, to, mpiTag(tag), comm_), "MPI_Send(control)");
}

// Note [Receive by matched probe]: a bounded receive probes for the message (MPI_Improbe) until it has come or
// the deadline passes, then takes exactly that message (MPI_Mrecv); nothing stays posted after a miss, so there
// is nothing to cancel. It used to post MPI_Irecv and MPI_Cancel it at the deadline, which MPI allows, but Open MPI
// 4.1's UCX PML with UCX 1.13 aborts the process when the receive matched between the last test and the cancel
// (`ucp_tag_exp_remove: Assertion !(req->flags & UCP_REQUEST_FLAG_COMPLETED)`, seen in the cluster tier on UCX).
// A matched probe removes the message from matching at once, so another thread's probe cannot take it too.
bool MpiChannel::receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) {
  return pollUntil(deadline, [&] {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    checkMpi(MPI_Improbe(from, mpiTag(tag), comm_, &found, &message, &status), "MPI_Improbe(control)");
    if (found) {
      checkMpi(MPI_Mrecv(data, static_cast<int>(bytes), MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv(control)");
    }
    return found != 0;
  });
}

// Collectives are started non-blocking and waited for here: without a bound as MPI_Wait, with one under the
// stall inspector. MPI cannot cancel a collective, so a timed-out one stays pending; the PeerError ends the
// process anyway (docs/protocol.md, "Failure semantics").
void MpiChannel::complete(MPI_Request& request, const char* op) {
  if (!bound_) {
    checkMpi(MPI_Wait(&request, MPI_STATUS_IGNORE), op);
    return;
  }
  waitOrStall(
      bound_->policy, [&](Deadline deadline) { return testUntil(request, deadline); },
      [&] { return fmt::format("{} over {} ranks to complete; the others: {}", op, size_, otherRanks()); });
}

std::string MpiChannel::otherRanks() const {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  checkMpi(MPI_Comm_group(comm_, &group), "MPI_Comm_group(control)");
  checkMpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group(world)");
  std::vector<int> ranks(static_cast<std::size_t>(size_)), worldRanks(ranks.size());
  for (int r = 0; r < size_; ++r) ranks[static_cast<std::size_t>(r)] = r;
  checkMpi(MPI_Group_translate_ranks(group, size_, ranks.data(), world, worldRanks.data()),
           "MPI_Group_translate_ranks(control)");
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) out.push_back(bound_->describe(worldRanks[static_cast<std::size_t>(r)]));
  }
  return fmt::format("{}", fmt::join(out, "; "));
}

void MpiChannel::barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier(control)");
  complete(request, "MPI_Barrier");
}

void MpiChannel::broadcast(void* data, std::size_t bytes, int root) {
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &request), "MPI_Ibcast(control)");
  complete(request, "MPI_Bcast");
}

void MpiChannel::allreduce(void* data, std::size_t count, Element element, Reduce op) {
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpiType(element), mpiOp(op), comm_, &request),
           "MPI_Iallreduce(control)");
  complete(request, "MPI_Allreduce");
}

// A started collective: its request, and the count arrays MPI reads until it completes.
class MpiChannel::Pending : public PendingCollective {
 public:
  Pending(MpiChannel& channel, const char* op) : channel_(channel), op_(op) {}
  bool test() override {
    if (request == MPI_REQUEST_NULL) return true;
    int done = 0;
    checkMpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(control)");
    return done != 0;
  }
  void wait() override {
    if (request != MPI_REQUEST_NULL) channel_.complete(request, op_);
  }
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, offsets;

 private:
  MpiChannel& channel_;
  const char* op_;
};

std::unique_ptr<PendingCollective> MpiChannel::startAllreduce(void* data, std::size_t count, Element element,
                                                              Reduce op) {
  auto pending = std::make_unique<Pending>(*this, "MPI_Iallreduce");
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpiType(element), mpiOp(op), comm_,
                          &pending->request),
           "MPI_Iallreduce(control)");
  return pending;
}

std::unique_ptr<PendingCollective> MpiChannel::startReduceScatter(void* data, const std::vector<std::size_t>& counts,
                                                                  Element element, Reduce op) {
  RP_CHECK(static_cast<int>(counts.size()) == size_, "reduce-scatter of {} blocks over {} ranks", counts.size(), size_);
  auto pending = std::make_unique<Pending>(*this, "MPI_Ireduce_scatter");
  for (std::size_t c : counts) pending->counts.push_back(static_cast<int>(c));
  checkMpi(MPI_Ireduce_scatter(MPI_IN_PLACE, data, pending->counts.data(), mpiType(element), mpiOp(op), comm_,
                               &pending->request),
           "MPI_Ireduce_scatter(control)");
  return pending;
}

std::unique_ptr<PendingCollective> MpiChannel::startAllgather(void* data, const std::vector<std::size_t>& counts,
                                                              Element element) {
  RP_CHECK(static_cast<int>(counts.size()) == size_, "all-gather of {} blocks over {} ranks", counts.size(), size_);
  auto pending = std::make_unique<Pending>(*this, "MPI_Iallgatherv");
  int offset = 0;
  for (std::size_t c : counts) {
    pending->counts.push_back(static_cast<int>(c));
    pending->offsets.push_back(offset);
    offset += static_cast<int>(c);
  }
  checkMpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, pending->counts.data(), pending->offsets.data(),
                           mpiType(element), comm_, &pending->request),
           "MPI_Iallgatherv(control)");
  return pending;
}

std::vector<std::vector<std::uint8_t>> MpiChannel::gather(const void* data, std::size_t bytes, int root) {
  const int length = static_cast<int>(bytes);
  std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(static_cast<std::size_t>(size_));
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_, &request),
           "MPI_Igather(control lengths)");
  complete(request, "MPI_Gather");
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::vector<std::uint8_t> all(rank_ == root ? static_cast<std::size_t>(total) : 0);
  checkMpi(
      MPI_Igatherv(data, length, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE, root, comm_, &request),
      "MPI_Igatherv(control)");
  complete(request, "MPI_Gatherv");
  std::vector<std::vector<std::uint8_t>> out;
  if (rank_ != root) return out;
  for (int r = 0; r < size_; ++r) {
    const auto begin = all.begin() + offsets[static_cast<std::size_t>(r)];
    out.emplace_back(begin, begin + lengths[static_cast<std::size_t>(r)]);
  }
  return out;
}

std::unique_ptr<ControlChannel> MpiChannel::duplicate() {
  MPI_Comm comm = MPI_COMM_NULL;
  checkMpi(MPI_Comm_dup(comm_, &comm), "MPI_Comm_dup(control)");
  auto out = std::unique_ptr<MpiChannel>(new MpiChannel(comm, Owned{}));
  out->bound_ = bound_;
  return out;
}

std::unique_ptr<ControlChannel> MpiChannel::split(int color, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  checkMpi(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split(control)");
  auto out = std::unique_ptr<MpiChannel>(new MpiChannel(comm, Owned{}));
  out->bound_ = bound_;
  return out;
}

}  // namespace rp::control
