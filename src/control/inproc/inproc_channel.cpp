#include "control/inproc/inproc_channel.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace rp::control {

void InProcHub::post(int from, int to, Tag tag, const void* data, std::size_t bytes) {
  RP_CHECK(to >= 0 && to < size_, "send to rank {} outside a world of {}", to, size_);
  const auto* p = static_cast<const std::uint8_t*>(data);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mailboxes_[{from, to, mpiTag(tag)}].emplace_back(p, p + bytes);
  }
  arrived_.notify_all();
}

bool InProcHub::take(int from, int to, Tag tag, void* data, std::size_t bytes, ControlChannel::Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = mailboxes_[{from, to, mpiTag(tag)}];
  ++waiting_;
  const bool arrived = arrived_.wait_until(lock, deadline, [&] { return !box.empty() || !abandoned_.empty(); });
  --waiting_;
  if (!arrived) return false;
  if (box.empty()) throwIfAbandoned();
  const auto& message = box.front();
  RP_CHECK(message.size() == bytes, "message of {} bytes received into {}", message.size(), bytes);
  std::memcpy(data, message.data(), bytes);
  box.pop_front();
  return true;
}

std::vector<std::vector<std::uint8_t>> InProcHub::exchange(std::uint64_t seq, int rank, const void* data,
                                                           std::size_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  Round& round = rounds_[seq];
  round.parts.resize(static_cast<std::size_t>(size_));
  const auto* p = static_cast<const std::uint8_t*>(data);
  round.parts[static_cast<std::size_t>(rank)].assign(p, p + bytes);
  ++round.arrived;
  arrived_.notify_all();
  ++waiting_;
  const bool all = arrived_.wait_for(lock, std::chrono::minutes(10),
                                     [&] { return round.arrived == size_ || !abandoned_.empty(); });
  --waiting_;
  if (!all) {
    RP_THROW(PeerError, "in-process collective #{}: {} of {} ranks arrived in 10 minutes", seq, round.arrived, size_);
  }
  if (round.arrived < size_) throwIfAbandoned();
  std::vector<std::vector<std::uint8_t>> parts = round.parts;
  if (++round.left == size_) rounds_.erase(seq);
  return parts;
}

int InProcHub::waiting() {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_;
}

std::shared_ptr<InProcHub> InProcHub::child(std::uint64_t seq, int color, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& hub = children_[{seq, color}];
  if (!hub) {
    hub = std::make_shared<InProcHub>(size);
    hub->abandoned_ = abandoned_;
  }
  return hub;
}

void InProcHub::abandon(int rank, const std::string& why) {
  std::vector<std::shared_ptr<InProcHub>> children;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abandoned_.empty()) abandoned_ = fmt::format("rank {} failed: {}", rank, why);
    for (const auto& [key, hub] : children_) children.push_back(hub);
  }
  arrived_.notify_all();
  for (const auto& hub : children) hub->abandon(rank, why);
}

void InProcHub::throwIfAbandoned() const {
  if (!abandoned_.empty()) RP_THROW(PeerError, "in-process ranks: {}", abandoned_);
}

void InProcChannel::send(int to, Tag tag, const void* data, std::size_t bytes) {
  hub_.post(rank_, to, tag, data, bytes);
}

bool InProcChannel::receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) {
  return hub_.take(from, rank_, tag, data, bytes, deadline);
}

void InProcChannel::barrier() {
  exchange(nullptr, 0);
}

void InProcChannel::broadcast(void* data, std::size_t bytes, int root) {
  const auto parts = exchange(data, rank_ == root ? bytes : 0);
  const auto& from = parts.at(static_cast<std::size_t>(root));
  RP_CHECK(from.size() == bytes, "broadcast of {} bytes received into {}", from.size(), bytes);
  if (rank_ != root) std::memcpy(data, from.data(), bytes);
}

void InProcChannel::allreduce(void* data, std::size_t count, Element element, Reduce op) {
  const std::size_t bytes = count * elementBytes(element);
  const auto parts = exchange(data, bytes);
  std::vector<std::uint8_t> out = parts.front();
  for (std::size_t r = 1; r < parts.size(); ++r) {
    RP_CHECK(parts[r].size() == bytes, "allreduce of {} bytes from rank {} into {}", parts[r].size(), r, bytes);
    reduceInto(out.data(), parts[r].data(), count, element, op);
  }
  if (bytes > 0) std::memcpy(data, out.data(), bytes);
}

namespace {

// Block r of `counts` (rank order) as a byte range: its offset and its length.
std::pair<std::size_t, std::size_t> blockOf(const std::vector<std::size_t>& counts, int r, std::size_t elementSize) {
  std::size_t offset = 0;
  for (int q = 0; q < r; ++q) offset += counts[static_cast<std::size_t>(q)];
  return {offset * elementSize, counts[static_cast<std::size_t>(r)] * elementSize};
}

}  // namespace

std::unique_ptr<PendingCollective> InProcChannel::startReduceScatter(void* data, const std::vector<std::size_t>& counts,
                                                                     Element element, Reduce op) {
  RP_CHECK(static_cast<int>(counts.size()) == size(), "reduce-scatter of {} blocks over {} ranks", counts.size(),
           size());
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  const auto parts = exchange(data, total * elementBytes(element));
  const auto [offset, bytes] = blockOf(counts, rank_, elementBytes(element));
  std::vector<std::uint8_t> out(parts.front().begin() + static_cast<std::ptrdiff_t>(offset),
                                parts.front().begin() + static_cast<std::ptrdiff_t>(offset + bytes));
  for (std::size_t r = 1; r < parts.size(); ++r) {
    RP_CHECK(parts[r].size() == parts.front().size(), "reduce-scatter of {} bytes from rank {} into {}",
             parts[r].size(), r, parts.front().size());
    reduceInto(out.data(), parts[r].data() + offset, counts[static_cast<std::size_t>(rank_)], element, op);
  }
  if (bytes > 0) std::memcpy(data, out.data(), bytes);
  return finishedCollective();
}

std::unique_ptr<PendingCollective> InProcChannel::startAllgather(void* data, const std::vector<std::size_t>& counts,
                                                                 Element element) {
  RP_CHECK(static_cast<int>(counts.size()) == size(), "all-gather of {} blocks over {} ranks", counts.size(), size());
  const auto [mine, myBytes] = blockOf(counts, rank_, elementBytes(element));
  const auto parts = exchange(static_cast<const std::uint8_t*>(data) + mine, myBytes);
  for (int r = 0; r < size(); ++r) {
    const auto [offset, bytes] = blockOf(counts, r, elementBytes(element));
    const auto& part = parts[static_cast<std::size_t>(r)];
    RP_CHECK(part.size() == bytes, "all-gather block of {} bytes from rank {} into {}", part.size(), r, bytes);
    if (r != rank_ && bytes > 0) std::memcpy(static_cast<std::uint8_t*>(data) + offset, part.data(), bytes);
  }
  return finishedCollective();
}

std::vector<std::vector<std::uint8_t>> InProcChannel::gather(const void* data, std::size_t bytes, int root) {
  auto parts = exchange(data, bytes);
  if (rank_ != root) return {};
  return parts;
}

std::unique_ptr<ControlChannel> InProcChannel::duplicate() {
  const std::uint64_t seq = seq_;
  barrier();
  return std::make_unique<InProcChannel>(hub_.child(seq, 0, hub_.size()), rank_);
}

std::unique_ptr<ControlChannel> InProcChannel::split(int color, int key) {
  const std::uint64_t seq = seq_;
  const int mine[2] = {color, key};
  const auto parts = exchange(mine, sizeof(mine));
  std::vector<std::pair<int, int>> group;  // (key, rank) of the ranks with this color
  for (std::size_t r = 0; r < parts.size(); ++r) {
    int theirs[2];
    std::memcpy(theirs, parts[r].data(), sizeof(theirs));
    if (theirs[0] == color) group.emplace_back(theirs[1], static_cast<int>(r));
  }
  std::sort(group.begin(), group.end());
  const auto at = std::find(group.begin(), group.end(), std::make_pair(key, rank_));
  return std::make_unique<InProcChannel>(hub_.child(seq, color, static_cast<int>(group.size())),
                                         static_cast<int>(at - group.begin()));
}

}  // namespace rp::control
