#include "memory/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

#include "common/error.h"
#include "common/log.h"

namespace rp::memory {
namespace {

std::uint8_t* mapFd(int fd, std::size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    RP_THROW(SystemError, "mmap of shared segment {} ({} bytes) failed: {}", name, bytes, std::strerror(err));
  }
  ::close(fd);
  return static_cast<std::uint8_t*>(p);
}

}  // namespace

ShmSegment::ShmSegment(std::string name, std::uint8_t* data, std::size_t size, bool owner)
    : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}

int ShmSegment::removeStale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  const std::time_t now = std::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    for (const char* prefix : {"roundpipe-", "rp-ring-"}) {
      const std::size_t n = std::strlen(prefix);
      if (name.compare(0, n, prefix) != 0) continue;
      char* end = nullptr;
      const long pid = std::strtol(name.c_str() + n, &end, 10);
      if (end == name.c_str() + n || *end != '-' || pid <= 0) break;
      struct stat st {};
      const std::string path = dir + "/" + name;
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) break;  // its creator may still need it
      if (::stat(path.c_str(), &st) != 0 || now - st.st_mtime < kStaleAfterSeconds) break;
      if (::unlink(path.c_str()) == 0) {
        ++removed;
        RP_LOG_WARN("removed {}: a shared segment left by process {}, which no longer exists (Note [Shm lifetime])",
                    path, pid);
      }
      break;
    }
  }
  ::closedir(d);
  return removed;
}

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes) {
  removeStale();
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) RP_THROW(SystemError, "shm_open({}, O_CREAT|O_EXCL) failed: {}", name, std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    RP_THROW(SystemError, "sizing shared segment {} to {} bytes failed: {} (is /dev/shm large enough?)", name, bytes,
             std::strerror(err));
  }
  std::uint8_t* data = nullptr;
  try {
    data = mapFd(fd, bytes, name);
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
  return ShmSegment(name, data, bytes, true);
}

ShmSegment ShmSegment::open(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) RP_THROW(SystemError, "shm_open({}) failed: {}", name, std::strerror(errno));
  return ShmSegment(name, mapFd(fd, bytes, name), bytes, false);
}

ShmSegment::~ShmSegment() {
  release();
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

void ShmSegment::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

void ShmSegment::release() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  unlink();
}

}  // namespace rp::memory
