// A read-only memory mapping of a whole file (RAII). Not thread-affine; the mapping is immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rp {

class MappedFile {
 public:
  // Maps `path` read-only; throws InputError naming the file when it cannot be opened or mapped.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace rp
