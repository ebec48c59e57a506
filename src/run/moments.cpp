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
// the run goes on from moments within the 8-bit format's rounding of the saved ones, and says so once. The
// conversion reads a chunk of a tensor at a time, so it needs no memory beyond the run's own.

namespace {

// Elements converted at a time (a multiple of q8::kBlock): a resume in the other width stages 8 MB, not the
// tensor's float32 moments.
constexpr std::size_t kConvertChunk = std::size_t{1} << 20;

// The codes and absmax slices of elements [begin, begin + count) of tensor `name` (`begin` a block's first).
void codeSlices(const std::string& name, const std::vector<std::int64_t>& shape, std::size_t begin, std::size_t count,
                void* codesM, void* absmaxM, void* codesV, void* absmaxV, std::vector<checkpoint::Slice>& out) {
  using checkpoint::Kind;
  namespace q8 = optim::q8;
  const std::vector<std::int64_t> blocksShape{
      static_cast<std::int64_t>(q8::blocksOf(static_cast<std::size_t>(checkpoint::numel(shape))))};
  const auto at = static_cast<std::int64_t>(begin), n = static_cast<std::int64_t>(count);
  const auto block = static_cast<std::int64_t>(begin / q8::kBlock),
             blocks = static_cast<std::int64_t>(q8::blocksOf(count));
  out.push_back({Kind::kExpAvgCodes, name, shape, at, n, codesM});
  out.push_back({Kind::kExpAvgAbsmax, name, blocksShape, block, blocks, absmaxM});
  out.push_back({Kind::kExpAvgSqCodes, name, shape, at, n, codesV});
  out.push_back({Kind::kExpAvgSqAbsmax, name, blocksShape, block, blocks, absmaxV});
}

}  // namespace

bool savedEightBit(const checkpoint::Manifest& saved, const std::string& name) {
  return std::any_of(saved.slices.begin(), saved.slices.end(), [&](const checkpoint::SliceRecord& r) {
    return r.tensor == name && r.kind == checkpoint::Kind::kExpAvgCodes;
  });
}

void MomentSlices::add(optim::AdamW& adamw, std::size_t param, const std::string& name,
                       const std::vector<std::int64_t>& shape, std::size_t begin, std::size_t end,
                       const checkpoint::Manifest* saved, std::vector<checkpoint::Slice>& out) {
  using checkpoint::Kind;
  const bool eightBit = adamw.eightBit(param);
  const bool convert = saved != nullptr && savedEightBit(*saved, name) != eightBit &&
                       std::any_of(saved->slices.begin(), saved->slices.end(),
                                   [&](const checkpoint::SliceRecord& r) { return r.tensor == name; });
  if (convert) {
    pending_.push_back({&adamw, param, name, shape, begin, end});
    return;
  }
  if (!eightBit) {
    const auto n = static_cast<std::int64_t>(end - begin);
    out.push_back({Kind::kExpAvg, name, shape, static_cast<std::int64_t>(begin), n, adamw.expAvg(param).data()});
    out.push_back({Kind::kExpAvgSq, name, shape, static_cast<std::int64_t>(begin), n, adamw.expAvgSq(param).data()});
    if (adamw.config().amsgrad) {
      out.push_back(
          {Kind::kMaxExpAvgSq, name, shape, static_cast<std::int64_t>(begin), n, adamw.maxExpAvgSq(param).data()});
    }
    return;
  }
  RP_CHECK(begin % optim::q8::kBlock == 0, "{}: 8-bit moments from element {}, not a block's first", name, begin);
  codeSlices(name, shape, begin, end - begin, adamw.codesM(param).data(), adamw.absmaxM(param).data(),
             adamw.codesV(param).data(), adamw.absmaxV(param).data(), out);
}

std::size_t MomentSlices::convert(const std::filesystem::path& dir, const checkpoint::Manifest& saved) {
  using checkpoint::Kind;
  namespace q8 = optim::q8;
  for (const Pending& p : pending_) {
    optim::AdamW& a = *p.adamw;
    std::vector<checkpoint::Slice> slices;
    if (a.eightBit(p.param)) {  // float32 in the checkpoint, quantized a chunk (whole blocks) at a time
      std::vector<float> m, v;
      for (std::size_t c = p.begin; c < p.end; c += kConvertChunk) {
        const std::size_t n = std::min(kConvertChunk, p.end - c);
        m.resize(n);
        v.resize(n);
        const auto at = static_cast<std::int64_t>(c), count = static_cast<std::int64_t>(n);
        checkpoint::readSlices(dir, saved,
                               {{Kind::kExpAvg, p.name, p.shape, at, count, m.data()},
                                {Kind::kExpAvgSq, p.name, p.shape, at, count, v.data()}});
        const std::size_t to = c - p.begin;  // a multiple of kBlock, as p.begin is
        q8::quantize(q8::signedMap(), m.data(), n, a.codesM(p.param).data() + to,
                     a.absmaxM(p.param).data() + to / q8::kBlock);
        q8::quantize(q8::unsignedMap(), v.data(), n, a.codesV(p.param).data() + to,
                     a.absmaxV(p.param).data() + to / q8::kBlock);
      }
      continue;
    }
    // 8-bit in the checkpoint: the blocks that cover the part (the first may start before it), a chunk at a time.
    const auto total = static_cast<std::size_t>(checkpoint::numel(p.shape));
    const std::size_t blocksEnd = std::min(total, q8::blocksOf(p.end) * q8::kBlock);
    std::vector<std::uint8_t> codesM, codesV;
    std::vector<float> absmaxM, absmaxV, values;
    for (std::size_t c = p.begin - p.begin % q8::kBlock; c < blocksEnd; c += kConvertChunk) {
      const std::size_t n = std::min(kConvertChunk, blocksEnd - c);
      codesM.resize(n);
      codesV.resize(n);
      absmaxM.resize(q8::blocksOf(n));
      absmaxV.resize(q8::blocksOf(n));
      values.resize(n);
      slices.clear();
      codeSlices(p.name, p.shape, c, n, codesM.data(), absmaxM.data(), codesV.data(), absmaxV.data(), slices);
      checkpoint::readSlices(dir, saved, slices);
      const std::size_t lo = std::max(c, p.begin), hi = std::min(c + n, p.end);  // the part's elements in it
      q8::dequantize(q8::signedMap(), codesM.data(), absmaxM.data(), n, values.data());
      std::copy(values.begin() + static_cast<std::ptrdiff_t>(lo - c),
                values.begin() + static_cast<std::ptrdiff_t>(hi - c), a.expAvg(p.param).data() + (lo - p.begin));
      q8::dequantize(q8::unsignedMap(), codesV.data(), absmaxV.data(), n, values.data());
      std::copy(values.begin() + static_cast<std::ptrdiff_t>(lo - c),
                values.begin() + static_cast<std::ptrdiff_t>(hi - c), a.expAvgSq(p.param).data() + (lo - p.begin));
    }
  }
  const std::size_t converted = pending_.size();
  pending_.clear();
  return converted;
}

}  // namespace rp::run
