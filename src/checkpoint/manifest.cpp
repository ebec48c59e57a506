#include "checkpoint/manifest.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "checkpoint/directory.h"
#include "checkpoint/shard.h"
#include "common/error.h"

namespace rp::checkpoint {
namespace {

using nlohmann::json;

template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) RP_THROW(InputError, "{}: field '{}' is missing", where, key);
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    RP_THROW(InputError, "{}: field '{}' has the wrong type ({})", where, key, j.at(key).dump());
  }
}

// Each (tensor, kind)'s slices sorted by offset must tile [0, numel).
void checkCoverage(const std::vector<SliceRecord>& slices, const std::string& where) {
  std::map<std::pair<std::string, Kind>, std::vector<const SliceRecord*>> groups;
  for (const auto& s : slices) groups[{s.tensor, s.kind}].push_back(&s);
  for (auto& [key, list] : groups) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    std::int64_t next = 0;
    for (const SliceRecord* s : list) {
      if (s->shape != list.front()->shape) {
        RP_THROW(InputError, "{}: tensor '{}' ({}) is listed with two shapes", where, key.first, kindName(key.second));
      }
      if (s->offset != next || s->count <= 0) {
        RP_THROW(InputError, "{}: the slices of '{}' ({}) do not tile it: expected offset {}, found {}", where,
                 key.first, kindName(key.second), next, s->offset);
      }
      next += s->count;
    }
    if (next != numel(list.front()->shape)) {
      RP_THROW(InputError, "{}: the slices of '{}' ({}) cover {} of its {} elements", where, key.first,
               kindName(key.second), next, numel(list.front()->shape));
    }
  }
}

}  // namespace

json toJson(const Manifest& m) {
  json tensors = json::array();
  std::map<std::pair<std::string, Kind>, std::size_t> index;
  for (const auto& s : m.slices) {
    auto [it, fresh] = index.try_emplace({s.tensor, s.kind}, tensors.size());
    if (fresh)
      tensors.push_back(
          {{"name", s.tensor}, {"kind", kindName(s.kind)}, {"shape", s.shape}, {"slices", json::array()}});
    tensors[it->second]["slices"].push_back(
        {{"file", s.file}, {"offset", s.offset}, {"count", s.count}, {"crc32", s.crc32}});
  }
  json files = json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  return {{"format", kFormatName},  {"version", kFormatVersion}, {"written_by", m.writtenBy},
          {"step", m.step},         {"writers", m.writers},      {"model", m.model},
          {"lora", m.lora},         {"training", m.training},    {"run_config", m.runConfig},
          {"tensors", tensors},     {"files", files}};
}

Manifest fromJson(const json& j, const std::string& where) {
  if (!j.is_object() || field<std::string>(j, "format", where) != kFormatName) {
    RP_THROW(InputError, "{}: not a roundpipe checkpoint manifest (format must be \"{}\")", where, kFormatName);
  }
  const int version = field<int>(j, "version", where);
  if (version != kFormatVersion) {
    RP_THROW(InputError, "{}: checkpoint format version {}, this roundpipe reads version {}", where, version,
             kFormatVersion);
  }
  Manifest m;
  m.step = field<std::int64_t>(j, "step", where);
  m.writers = field<int>(j, "writers", where);
  m.model = field<json>(j, "model", where);
  m.lora = field<json>(j, "lora", where);
  m.training = field<json>(j, "training", where);
  m.runConfig = field<std::string>(j, "run_config", where);
  if (j.contains("written_by")) m.writtenBy = field<std::string>(j, "written_by", where);
  for (const json& t : field<json>(j, "tensors", where)) {
    const auto name = field<std::string>(t, "name", where);
    const std::string at = fmt::format("{}: tensor '{}'", where, name);
    const Kind kind = parseKind(field<std::string>(t, "kind", at), at);
    const auto shape = field<std::vector<std::int64_t>>(t, "shape", at);
    for (const json& s : field<json>(t, "slices", at)) {
      m.slices.push_back({kind, name, shape, field<std::string>(s, "file", at), field<std::int64_t>(s, "offset", at),
                          field<std::int64_t>(s, "count", at), field<std::uint32_t>(s, "crc32", at)});
      if (m.slices.back().file.find('/') != std::string::npos) RP_THROW(InputError, "{}: file name with '/'", at);
    }
  }
  checkCoverage(m.slices, where);
  if (j.contains("files")) {
    std::set<std::string> listed;
    for (const json& f : field<json>(j, "files", where)) {
      m.files.push_back({field<std::string>(f, "name", where), field<std::int64_t>(f, "bytes", where),
                         field<std::uint32_t>(f, "crc32", where)});
      listed.insert(m.files.back().name);
    }
    for (const auto& s : m.slices) {
      if (!listed.count(s.file)) {
        RP_THROW(InputError, "{}: shard file '{}' (tensor '{}') is not among the files listed", where, s.file,
                 s.tensor);
      }
    }
  }
  return m;
}

void writeManifest(const std::filesystem::path& dir, const Manifest& m) {
  const auto path = dir / "manifest.json";
  {
    std::ofstream out(path);
    out << toJson(m).dump(1) << '\n';
    out.flush();
    if (!out) RP_THROW(SystemError, "cannot write {} ({})", path.string(), std::strerror(errno));
  }
  syncFile(path);
}

Manifest readManifest(const std::filesystem::path& dir) {
  const auto path = dir / "manifest.json";
  std::ifstream in(path);
  if (!in) {
    RP_THROW(InputError, "{} is missing: {} is not a complete checkpoint", path.string(), dir.string());
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: not valid JSON (truncated or corrupt): {}", path.string(), e.what());
  }
  return fromJson(j, path.string());
}

void readSlices(const std::filesystem::path& dir, const Manifest& m, const std::vector<Slice>& wanted) {
  // Datasets are read whole (to verify their checksum) and kept while consecutive requests use them.
  const SliceRecord* cached = nullptr;
  std::vector<std::uint8_t> buffer;
  std::set<std::string> verified;  // files whose size and checksum were checked
  for (const Slice& w : wanted) {
    std::int64_t covered = 0;
    bool known = false;
    for (const SliceRecord& r : m.slices) {
      if (r.tensor != w.tensor || r.kind != w.kind) continue;
      known = true;
      if (r.shape != w.shape) {
        RP_THROW(InputError, "{}: tensor '{}' ({}) has shape [{}] in the checkpoint, the model has [{}]",
                 (dir / "manifest.json").string(), w.tensor, kindName(w.kind), fmt::join(r.shape, ", "),
                 fmt::join(w.shape, ", "));
      }
      const std::int64_t a = std::max(r.offset, w.offset), b = std::min(r.offset + r.count, w.offset + w.count);
      if (a >= b) continue;
      if (cached != &r) {
        if (verified.insert(r.file).second) {
          const auto f =
              std::find_if(m.files.begin(), m.files.end(), [&](const FileRecord& x) { return x.name == r.file; });
          if (f != m.files.end()) verifyFile(dir / r.file, *f);
        }
        buffer.resize(static_cast<std::size_t>(r.count) * elementBytes(r.kind));
        readRecord(dir / r.file, r, buffer.data());
        cached = &r;
      }
      const std::size_t size = elementBytes(w.kind);
      std::memcpy(static_cast<std::uint8_t*>(w.data) + static_cast<std::size_t>(a - w.offset) * size,
                  buffer.data() + static_cast<std::size_t>(a - r.offset) * size,
                  static_cast<std::size_t>(b - a) * size);
      covered += b - a;
    }
    if (!known) {
      RP_THROW(InputError, "{}: the checkpoint has no {} of tensor '{}'", (dir / "manifest.json").string(),
               kindName(w.kind), w.tensor);
    }
    RP_CHECK(covered == w.count, "slices of '{}' cover {} of the {} wanted elements", w.tensor, covered, w.count);
  }
}

}  // namespace rp::checkpoint
