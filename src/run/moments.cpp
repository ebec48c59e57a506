#include "run/moments.h"

#include <algorithm>

#include "common/error.h"
#include "optim/blockwise8.h"

namespace rp::run {

// Note [Moments across widths]
// A checkpoint keeps each tensor's moments in the width the run that saved it used: float32, or the 8-bit codes
// with one absmax a block (blocks counted from the tensor's first element, so any split of a tensor into parts of
// whole blocks reads the same blocks back: resharded resumes are bitwise). A run resumed with the other
// optim.state_bits converts on load: float32 moments are quantized block by block (the codes a step of the 8-bit
// run would have written for those values), 8-bit ones dequantized (code * absmax, exact in float32). Either way
// the run goes on from moments within the 8-bit format's rounding of the saved ones, and says so once.

bool savedEightBit(const checkpoint::Manifest& saved, const std::string& name) {
  return std::any_of(saved.slices.begin(), saved.slices.end(), [&](const checkpoint::SliceRecord& r) {
    return r.tensor == name && r.kind == checkpoint::Kind::kExpAvgCodes;
  });
}

void MomentSlices::add(optim::AdamW& adamw, std::size_t param, const std::string& name,
                       const std::vector<std::int64_t>& shape, std::size_t begin, std::size_t end,
                       const checkpoint::Manifest* saved, std::vector<checkpoint::Slice>& out) {
  using checkpoint::Kind;
  const auto n = end - begin;
  const bool eightBit = adamw.eightBit(param);
  const std::vector<std::int64_t> blocksShape{
      static_cast<std::int64_t>(optim::q8::blocksOf(static_cast<std::size_t>(checkpoint::numel(shape))))};
  auto floats = [&](Kind kind, void* data) {
    out.push_back({kind, name, shape, static_cast<std::int64_t>(begin), static_cast<std::int64_t>(n), data});
  };
  auto codes = [&](Kind codesKind, Kind absmaxKind, void* codesData, void* absmaxData) {  // from `begin`
    RP_CHECK(begin % optim::q8::kBlock == 0, "{}: 8-bit moments from element {}, not a block's first", name, begin);
    const std::size_t count = end - begin;
    out.push_back(
        {codesKind, name, shape, static_cast<std::int64_t>(begin), static_cast<std::int64_t>(count), codesData});
    out.push_back({absmaxKind, name, blocksShape, static_cast<std::int64_t>(begin / optim::q8::kBlock),
                   static_cast<std::int64_t>(optim::q8::blocksOf(count)), absmaxData});
  };
  const bool convert = saved != nullptr && savedEightBit(*saved, name) != eightBit &&
                       std::any_of(saved->slices.begin(), saved->slices.end(),
                                   [&](const checkpoint::SliceRecord& r) { return r.tensor == name; });
  if (!convert) {
    if (eightBit) {
      codes(Kind::kExpAvgCodes, Kind::kExpAvgAbsmax, adamw.codesM(param).data(), adamw.absmaxM(param).data());
      codes(Kind::kExpAvgSqCodes, Kind::kExpAvgSqAbsmax, adamw.codesV(param).data(), adamw.absmaxV(param).data());
    } else {
      floats(Kind::kExpAvg, adamw.expAvg(param).data());
      floats(Kind::kExpAvgSq, adamw.expAvgSq(param).data());
      if (adamw.config().amsgrad) floats(Kind::kMaxExpAvgSq, adamw.maxExpAvgSq(param).data());
    }
    return;
  }
  Staged& s = staged_.emplace_back();
  s.adamw = &adamw;
  s.param = param;
  s.n = n;
  s.toEightBit = eightBit;
  if (eightBit) {  // float32 in the checkpoint
    s.m.resize(n);
    s.v.resize(n);
    floats(Kind::kExpAvg, s.m.data());
    floats(Kind::kExpAvgSq, s.v.data());
  } else {  // 8-bit in the checkpoint: the blocks that cover [begin, end), from the first one's start
    s.skip = begin % optim::q8::kBlock;
    begin -= s.skip;
    s.codesM.resize(n + s.skip);
    s.codesV.resize(n + s.skip);
    s.absmaxM.resize(optim::q8::blocksOf(n + s.skip));
    s.absmaxV.resize(optim::q8::blocksOf(n + s.skip));
    codes(Kind::kExpAvgCodes, Kind::kExpAvgAbsmax, s.codesM.data(), s.absmaxM.data());
    codes(Kind::kExpAvgSqCodes, Kind::kExpAvgSqAbsmax, s.codesV.data(), s.absmaxV.data());
  }
}

std::size_t MomentSlices::finish() {
  const std::size_t converted = staged_.size();
  for (Staged& s : staged_) {
    optim::AdamW& a = *s.adamw;
    if (s.toEightBit) {
      optim::q8::quantize(optim::q8::signedMap(), s.m.data(), s.n, a.codesM(s.param).data(), a.absmaxM(s.param).data());
      optim::q8::quantize(optim::q8::unsignedMap(), s.v.data(), s.n, a.codesV(s.param).data(),
                          a.absmaxV(s.param).data());
    } else {
      std::vector<float> values(s.codesM.size());
      optim::q8::dequantize(optim::q8::signedMap(), s.codesM.data(), s.absmaxM.data(), values.size(), values.data());
      std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(s.skip), s.n, a.expAvg(s.param).data());
      optim::q8::dequantize(optim::q8::unsignedMap(), s.codesV.data(), s.absmaxV.data(), values.size(), values.data());
      std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(s.skip), s.n, a.expAvgSq(s.param).data());
    }
  }
  staged_.clear();
  return converted;
}

}  // namespace rp::run
