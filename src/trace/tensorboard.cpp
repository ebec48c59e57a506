#include "trace/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace rp::trace {
namespace {

constexpr std::uint32_t kCastagnoli = 0x82F63B78u;  // the reflected CRC-32C polynomial

std::array<std::uint32_t, 256> crcTable() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protocol buffer encoding, the few wire types an Event needs.
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wireType) {
  varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wireType));
}
template <typename T>
void littleEndian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian, as the format is
  out.append(bytes, sizeof(T));
}
void bytesField(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

std::string eventHead(std::int64_t step) {
  std::string event;
  key(event, 1, 1);  // wall_time, seconds since the epoch
  littleEndian(event, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  key(event, 2, 0);  // step
  varint(event, static_cast<std::uint64_t>(step));
  return event;
}

std::string hostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = crcTable();
  std::uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t maskedCrc32c(const void* data, std::size_t size) {
  const std::uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& directory, std::int64_t resumedAt, std::string tagPrefix)
    : prefix_(std::move(tagPrefix)) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) RP_THROW(SystemError, "{}: cannot create the TensorBoard directory: {}", directory, ec.message());
  // TensorBoard reads a directory's event files in the order of their names, and a resumed run's must come after
  // the run it resumes even within the same second (a pid does not order them): the time to the microsecond,
  // fixed width, leads.
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  path_ = (std::filesystem::path(directory) / fmt::format("events.out.tfevents.{:010}.{:06}.{}.{}", micros / 1000000,
                                                          micros % 1000000, hostName(), static_cast<long>(::getpid())))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) RP_THROW(SystemError, "{}: cannot open for writing: {}", path_, std::strerror(errno));
  std::string version = eventHead(0);
  bytesField(version, 3, "brain.Event:2");
  record(version);
  if (resumedAt > 0) {
    std::string start = eventHead(resumedAt + 1), sessionLog;
    key(sessionLog, 1, 0);
    varint(sessionLog, 1);  // SessionLog.START
    bytesField(start, 7, sessionLog);
    record(start);
  }
}

void TensorBoardWriter::write(const StepMetrics& m) {
  const bool modelled = m.modelled();
  const std::vector<std::pair<std::string, std::optional<double>>> known{
      {"train/loss", m.loss},
      {"train/lr", m.lr},
      {"train/grad_norm", m.gradNorm},
      {"train/target_tokens", static_cast<double>(m.targetTokens)},  // 0: a step that trained nothing
      {"train/tokens_per_s", m.tokensPerSecond},
      {"train/step_time_s", m.stepTimeSeconds},
      {"train/loss_scale", m.lossScale},
      {"train/peak_rss_mb", m.peakResidentMb},
      {modelled ? "train/modelled_tflops" : "train/model_tflops", m.modelTflops},
      {modelled ? "train/modelled_mfu" : "train/mfu", m.mfu},
      {"eval/loss", m.evalLoss},
      {"eval/ppl", m.evalLoss ? std::optional<double>(std::exp(*m.evalLoss)) : std::nullopt}};
  std::vector<std::pair<std::string, double>> scalars;
  for (const auto& [tag, value] : known) {
    if (value) scalars.emplace_back(tag, *value);
  }
  write(m.step, scalars);
}

void TensorBoardWriter::write(std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    if (!std::isfinite(value)) continue;  // a skipped step's loss, an overflowed perplexity
    std::string v;
    bytesField(v, 1, prefix_ + tag);
    key(v, 2, 5);  // simple_value: a float, as TensorBoard keeps scalars
    littleEndian(v, static_cast<float>(value));
    bytesField(summary, 1, v);
  }
  std::string event = eventHead(step);
  bytesField(event, 5, summary);
  record(event);
}

void TensorBoardWriter::record(const std::string& event) {
  std::string framed;
  littleEndian(framed, static_cast<std::uint64_t>(event.size()));
  littleEndian(framed, maskedCrc32c(framed.data(), 8));
  framed += event;
  littleEndian(framed, maskedCrc32c(event.data(), event.size()));
  out_.write(framed.data(), static_cast<std::streamsize>(framed.size()));
  out_.flush();
  if (!out_) RP_THROW(SystemError, "{}: write failed (disk full?)", path_);
}

}  // namespace rp::trace
