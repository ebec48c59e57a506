#include "checkpoint/shard.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include <hdf5.h>
#include <unistd.h>

#include "checkpoint/directory.h"
#include "common/error.h"

namespace rp::checkpoint {
namespace {

constexpr hsize_t kChunkElements = hsize_t{1} << 20;  // 4 MiB of float32

// errno of the last failed write, if any, for "No space left on device" and its kind.
std::string reason() {
  return errno != 0 ? fmt::format(" ({})", std::strerror(errno)) : std::string();
}

// Closes an HDF5 handle on scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  // Closes now; false on failure (a close is where buffered writes reach the disk).
  bool close() {
    const herr_t rc = id_ >= 0 ? close_(id_) : 0;
    id_ = -1;
    return rc >= 0;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// No HDF5 error stacks on stderr: errors become exceptions. Per call: the library is built thread-safe,
// where this setting is per thread (saves run on the saver's thread).
void quiet() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// After a failed write (e.g. ENOSPC): frees the file's blocks, so that the flushes HDF5 makes when the
// objects and the file are closed fit. An object whose close failed would stay in HDF5's table and crash
// the library at exit.
void freeSpace(hid_t file) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) >= 0 && handle != nullptr) {
    if (::ftruncate(*static_cast<int*>(handle), 0) != 0) { /* nothing more to free */
    }
  }
}

// Closes and removes a shard whose write failed (every object in it already closed).
void abandon(hid_t file, const std::filesystem::path& path) {
  freeSpace(file);
  H5Fclose(file);
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

std::string datasetPath(const SliceRecord& r) {
  return fmt::format("/{}/{}", kindName(r.kind), r.tensor);
}

void writeAttr(hid_t object, const char* name, const std::vector<std::int64_t>& values, const std::string& where) {
  const hsize_t n = values.size();
  Handle space(n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle attr(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || (n > 0 && H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()) < 0)) {
    RP_THROW(SystemError, "{}: cannot write attribute '{}'{}", where, name, reason());
  }
}

// True when `type` (an open datatype handle, closed here) is exactly `expected`. Checked before every read: a
// read converts from the stored type, and HDF5's conversion of a corrupt stored type can crash.
bool hasType(hid_t type, hid_t expected) {
  Handle t(type, H5Tclose);
  return t.ok() && H5Tequal(t.get(), expected) > 0;
}

std::vector<std::int64_t> readAttr(hid_t object, const char* name, const std::string& where) {
  Handle attr(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) RP_THROW(InputError, "{}: attribute '{}' is missing", where, name);
  if (!hasType(H5Aget_type(attr.get()), H5T_STD_I64LE)) {
    RP_THROW(InputError, "{}: attribute '{}' is not 64-bit integers (corrupt file, or not a roundpipe shard)", where,
             name);
  }
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<std::int64_t> values(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  if (n < 0 || (n > 0 && H5Aread(attr.get(), H5T_NATIVE_INT64, values.data()) < 0)) {
    RP_THROW(InputError, "{}: attribute '{}' cannot be read (corrupt file)", where, name);
  }
  return values;
}

}  // namespace

std::vector<SliceRecord> writeShard(const std::filesystem::path& path, const std::vector<Slice>& slices) {
  quiet();
  const std::string file = path.string();
  errno = 0;
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) RP_THROW(SystemError, "cannot create checkpoint shard {}{}", file, reason());
  std::vector<SliceRecord> records;
  try {
    std::set<Kind> groups;
    for (const Slice& s : slices) {
      if (s.count <= 0) continue;
      if (s.tensor.find('/') != std::string::npos) RP_THROW(InternalError, "tensor name '{}' contains '/'", s.tensor);
      SliceRecord r{s.kind,
                    s.tensor,
                    s.shape,
                    path.filename().string(),
                    s.offset,
                    s.count,
                    crc32(s.data, static_cast<std::size_t>(s.count) * elementBytes(s.kind))};
      const bool codes = elementBytes(s.kind) == 1;
      const std::string where = fmt::format("{}: dataset {}", file, datasetPath(r));
      if (groups.insert(s.kind).second) {
        Handle g(H5Gcreate2(f, kindName(s.kind), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        if (!g.ok()) RP_THROW(SystemError, "{}: cannot create group /{}{}", file, kindName(s.kind), reason());
      }
      const hsize_t n = static_cast<hsize_t>(s.count), chunk = std::min(n, kChunkElements);
      Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      Handle props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_chunk(props.get(), 1, &chunk);
      Handle d(H5Dcreate2(f, datasetPath(r).c_str(), codes ? H5T_STD_U8LE : H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                          props.get(), H5P_DEFAULT),
               H5Dclose);
      if (!d.ok()) RP_THROW(SystemError, "{}: cannot create (already written in this shard?){}", where, reason());
      try {
        errno = 0;
        if (H5Dwrite(d.get(), codes ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data) < 0) {
          RP_THROW(SystemError, "{}: write failed{}", where, reason());
        }
        writeAttr(d.get(), "shape", s.shape, where);
        writeAttr(d.get(), "offset", {s.offset}, where);
        writeAttr(d.get(), "count", {s.count}, where);
        Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(type.get(), s.tensor.size());
        Handle scalar(H5Screate(H5S_SCALAR), H5Sclose);
        Handle attr(H5Acreate2(d.get(), "tensor", type.get(), scalar.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
        if (!attr.ok() || H5Awrite(attr.get(), type.get(), s.tensor.data()) < 0) {
          RP_THROW(SystemError, "{}: cannot write attribute 'tensor'{}", where, reason());
        }
        errno = 0;
        if (H5Dflush(d.get()) < 0) RP_THROW(SystemError, "{}: write failed{}", where, reason());
      } catch (...) {
        freeSpace(f);  // so that the dataset's closing flush fits
        d.close();
        throw;
      }
      d.close();
      records.push_back(std::move(r));
    }
    errno = 0;
    if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) RP_THROW(SystemError, "cannot finish checkpoint shard {}{}", file, reason());
  } catch (...) {
    abandon(f, path);
    throw;
  }
  if (H5Fclose(f) < 0) RP_THROW(SystemError, "cannot close checkpoint shard {}{}", file, reason());
  syncFile(path);
  return records;
}

void readRecord(const std::filesystem::path& path, const SliceRecord& r, void* out) {
  quiet();
  const std::string file = path.string();
  if (!std::filesystem::exists(path)) RP_THROW(InputError, "checkpoint shard {} is missing", file);
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok()) RP_THROW(InputError, "checkpoint shard {} cannot be opened: not an HDF5 file, or truncated", file);
  const std::string where = fmt::format("{}: dataset {}", file, datasetPath(r));
  Handle d(H5Dopen2(f.get(), datasetPath(r).c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.ok()) RP_THROW(InputError, "{} is missing or unreadable (corrupt file)", where);
  Handle space(H5Dget_space(d.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != r.count) {
    RP_THROW(InputError, "{} holds {} elements, the manifest says {}", where, H5Sget_simple_extent_npoints(space.get()),
             r.count);
  }
  if (readAttr(d.get(), "shape", where) != r.shape || readAttr(d.get(), "offset", where) != std::vector{r.offset}) {
    RP_THROW(InputError, "{}: its shape or offset attribute differs from the manifest", where);
  }
  const bool codes = elementBytes(r.kind) == 1;
  if (!hasType(H5Dget_type(d.get()), codes ? H5T_STD_U8LE : H5T_IEEE_F32LE)) {
    RP_THROW(InputError, "{} is not {} (corrupt file, or not a roundpipe shard)", where, codes ? "uint8" : "float32");
  }
  if (H5Dread(d.get(), codes ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    RP_THROW(InputError, "{} cannot be read: the file is truncated or corrupt", where);
  }
  const std::uint32_t crc = crc32(out, static_cast<std::size_t>(r.count) * elementBytes(r.kind));
  if (crc != r.crc32) {
    RP_THROW(InputError, "{}: checksum mismatch (crc32 {:08x}, the manifest says {:08x}): the file is corrupt", where,
             crc, r.crc32);
  }
}

FileRecord fileRecord(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) RP_THROW(SystemError, "cannot read back checkpoint shard {}: {}", path.string(), std::strerror(errno));
  FileRecord r{path.filename().string(), 0, 0};
  std::vector<char> buffer(std::size_t{1} << 22);
  std::uint32_t crc = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    crc = crc32Update(crc, buffer.data(), n);
    r.bytes += static_cast<std::int64_t>(n);
  }
  if (in.bad()) RP_THROW(SystemError, "cannot read back checkpoint shard {}: {}", path.string(), std::strerror(errno));
  r.crc32 = crc;
  return r;
}

void verifyFile(const std::filesystem::path& path, const FileRecord& record) {
  const std::string file = path.string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) RP_THROW(InputError, "checkpoint shard {} is missing or unreadable: {}", file, ec.message());
  if (static_cast<std::int64_t>(size) != record.bytes) {
    RP_THROW(InputError, "checkpoint shard {} has {} bytes, the manifest says {}: the file is truncated or damaged",
             file, size, record.bytes);
  }
  const FileRecord actual = fileRecord(path);
  if (actual.crc32 != record.crc32) {
    RP_THROW(InputError,
             "checkpoint shard {}: checksum mismatch (crc32 {:08x}, the manifest says {:08x}): the file is damaged",
             file, actual.crc32, record.crc32);
  }
}

}  // namespace rp::checkpoint
