#include "checkpoint/slices.h"

#include <zlib.h>

#include "common/error.h"

namespace rp::checkpoint {

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kWeights:
      return "weights";
    case Kind::kMaster:
      return "master";
    case Kind::kExpAvg:
      return "exp_avg";
    case Kind::kExpAvgSq:
      return "exp_avg_sq";
    case Kind::kMaxExpAvgSq:
      return "max_exp_avg_sq";
    case Kind::kExpAvgCodes:
      return "exp_avg_q8";
    case Kind::kExpAvgSqCodes:
      return "exp_avg_sq_q8";
    case Kind::kExpAvgAbsmax:
      return "exp_avg_absmax";
    case Kind::kExpAvgSqAbsmax:
      return "exp_avg_sq_absmax";
  }
  return "?";
}

std::size_t elementBytes(Kind kind) {
  return kind == Kind::kExpAvgCodes || kind == Kind::kExpAvgSqCodes ? 1 : 4;
}

Kind parseKind(const std::string& name, const std::string& where) {
  for (Kind k : kAllKinds) {
    if (name == kindName(k)) return k;
  }
  RP_THROW(InputError,
           "{}: unknown state kind '{}' (expected weights, master, exp_avg, exp_avg_sq, max_exp_avg_sq, exp_avg_q8, "
           "exp_avg_sq_q8, exp_avg_absmax or exp_avg_sq_absmax)",
           where, name);
}

std::string weightsAhead(const std::string& tensor, int ahead) {
  return ahead == 0 ? tensor : tensor + "@+" + std::to_string(ahead);
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::uint32_t crc32(const void* data, std::size_t bytes) {
  return crc32Update(0, data, bytes);
}

std::uint32_t crc32Update(std::uint32_t previous, const void* data, std::size_t bytes) {
  uLong crc = previous;
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = ::crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

}  // namespace rp::checkpoint
