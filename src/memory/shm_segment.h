// A POSIX shared-memory segment mapped by every rank of a node (RAII).
// Note [Shm lifetime]: the creator (local rank 0) creates and sizes the segment, every local rank maps it,
// then — after a node barrier — the name is unlinked at once. The memory lives while any rank maps it and
// the kernel reclaims it when the last mapping goes, so no exit path after the barrier (SIGKILL included)
// leaks a segment in /dev/shm. Before it the name must exist for the others to open: a creator killed in
// that window (a job killed while it starts) leaves it. So every create() first removes the names this
// project makes — /roundpipe-<pid>-… (the node store), /rp-ring-<pid>-… (CPU hand-off rings) — whose
// creating process no longer exists and which are older than any set-up (kStaleAfter): such a name is a leak,
// never one a starting job still needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rp::memory {

class ShmSegment {
 public:
  // A name older than this whose creator is gone is a leak (Note [Shm lifetime]).
  static constexpr int kStaleAfterSeconds = 600;
  // Removes such names from `dir` (/dev/shm, where glibc keeps POSIX segments); returns how many.
  static int removeStale(const std::string& dir = "/dev/shm");

  ShmSegment() = default;  // empty: maps nothing
  // Creates (O_CREAT | O_EXCL) a segment of `bytes`, zero-filled, and maps it.
  static ShmSegment create(const std::string& name, std::size_t bytes);
  // Maps an existing segment of `bytes`.
  static ShmSegment open(const std::string& name, std::size_t bytes);
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (idempotent); the mapping stays valid.
  void unlink();

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, std::uint8_t* data, std::size_t size, bool owner);
  void release() noexcept;

  std::string name_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false;  // this object created the name and has not unlinked it yet
};

}  // namespace rp::memory
