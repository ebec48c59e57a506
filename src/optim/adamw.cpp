#include "optim/adamw.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <regex>
#include <type_traits>

#include "common/error.h"
#include "common/parallel.h"
#include "optim/blockwise8.h"

namespace rp::optim {

std::optional<std::string> patternError(const std::string& pattern) {
  try {
    std::regex compiled(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

bool eightBitStates(const std::string& name, std::size_t n) {
  return n >= kMinEightBitElements && name.find("embed") == std::string::npos &&
         name.find("lm_head") == std::string::npos;
}

double momentBytes(const std::string& name, std::size_t n, int stateBits, bool amsgrad) {
  if (stateBits == 8 && eightBitStates(name, n)) return 2.0 * static_cast<double>(n) + 8.0 * q8::blocksOf(n);
  return (amsgrad ? 12.0 : 8.0) * static_cast<double>(n);
}

bool decays(const std::string& name, const std::vector<std::string>& noDecay) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& pattern : noDecay) {
    if (std::regex_search(lower, std::regex(pattern, std::regex::ECMAScript))) return false;
  }
  return true;
}

namespace {

// Where the tie bits of `n` second moments are set, in order, found on `threads` threads (Note [Split master]);
// through a mutable pointer they are cleared too.
template <typename V>
std::vector<std::size_t> scanTieBits(V* v, std::size_t n, int threads) {
  const int parts = parallel::partsFor(n, threads);
  std::vector<std::vector<std::size_t>> found(static_cast<std::size_t>(parts));
  parallel::forEachPart(parts, [&](int part) {
    const auto [begin, end] = parallel::partOf(n, part, parts);
    for (std::size_t k = begin; k < end; ++k) {
      if (!tieBit(v[k])) continue;
      found[static_cast<std::size_t>(part)].push_back(k);
      if constexpr (!std::is_const_v<V>) v[k] = withTieBit(v[k], false);
    }
  });
  std::vector<std::size_t> at;
  for (const auto& f : found) at.insert(at.end(), f.begin(), f.end());
  return at;
}

}  // namespace

AdamWStepScalars stepScalars(const AdamWConfig& c, double lr, std::int64_t step) {
  RP_CHECK(step >= 1, "AdamW step counts from 1, got {}", step);
  const double biasCorrection1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
  const double biasCorrection2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
  return AdamWStepScalars{
      static_cast<float>(1.0 - lr * c.weightDecay),
      static_cast<float>(c.beta1),
      static_cast<float>(1.0 - c.beta1),
      static_cast<float>(c.beta2),
      static_cast<float>(1.0 - c.beta2),
      static_cast<float>(lr / biasCorrection1),
      static_cast<float>(std::sqrt(biasCorrection2)),
      static_cast<float>(c.eps),
      1.0f,
  };
}

// torch.optim.AdamW, _single_tensor_adamw, in the same float32 operations, after clip_grad_norm_'s g *= coef
// (gradScale, Note [Clipping in the update]):
//   g = g * coef
//   param *= 1 - lr*wd
//   m = lerp(m, g, 1-beta1)             (m + w*(g - m) for w < 0.5)
//   v = v*beta2 + (1-beta2)*g*g
//   vmax = max(vmax, v)                 (amsgrad)
//   denom = sqrt(v or vmax) / sqrt(1 - beta2^t) + eps
//   param += -(lr / (1 - beta1^t)) * m / denom
// A split master (Note [Split master]) is joined from its halves and v's tie bit as it is read, and split
// again as it is written.
void adamwScalar(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& x) {
  const bool split = x.masterLow != nullptr;
  for (std::size_t i = 0; i < x.n; ++i) {
    const float g = x.grad.at(i) * s.gradScale;
    const float stored = x.expAvgSq[i];
    float p = (split ? joinMaster(x.modelCopy[i], x.masterLow[i], tieBit(stored)) : x.param[i]) * s.decay;
    float m = x.expAvg[i];
    m = s.oneMinusBeta1 < 0.5f ? m + s.oneMinusBeta1 * (g - m) : g - (g - m) * (1.0f - s.oneMinusBeta1);
    float v = (split ? withTieBit(stored, false) : stored) * s.beta2;
    v = v + s.oneMinusBeta2 * g * g;
    float second = v;
    if (amsgrad) {
      x.maxExpAvgSq[i] = std::max(x.maxExpAvgSq[i], v);
      second = x.maxExpAvgSq[i];
    }
    const float denom = std::sqrt(second) / s.biasCorrection2Sqrt + s.eps;
    p = p + (-s.stepSize) * (m / denom);
    x.expAvg[i] = m;
    if (split) {
      x.expAvgSq[i] = withTieBit(v, splitMaster(p, x.modelCopy[i], x.masterLow[i]));
      continue;
    }
    x.param[i] = p;
    x.expAvgSq[i] = v;
    if (x.copy == ModelCopy::kBFloat16) x.modelCopy[i] = toBFloat16(p);
    if (x.copy == ModelCopy::kFloat16) x.modelCopy[i] = toHalf(p);
  }
}

AdamW::AdamW(AdamWConfig config, AdamWKernel kernel, AdamW8Kernel kernel8)
    : config_(config), kernel_(kernel), kernel8_(kernel8) {
  RP_CHECK(kernel_ != nullptr && kernel8_ != nullptr, "AdamW needs its kernels");
  RP_CHECK(config_.stateBits == 32 || config_.stateBits == 8, "AdamW state bits are 32 or 8, got {}",
           config_.stateBits);
  RP_CHECK(config_.stateBits == 32 || !config_.amsgrad, "AdamW: amsgrad needs 32-bit states");
}

float fromHalf(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu, bits;
  if (exponent == 0x1F) {  // inf / NaN
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal half: normalise
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// F. Giesen's float_to_half_fast3_rtne: exact round-to-nearest-even with the FPU doing the subnormal case.
std::uint16_t toHalf(float value) {
  std::uint32_t f;
  std::memcpy(&f, &value, 4);
  const std::uint32_t sign = f & 0x80000000u;
  f ^= sign;
  std::uint32_t out;
  if (f >= (127u + 16u) << 23) {  // overflows (or is inf/NaN)
    out = f > 255u << 23 ? 0x7E00u : 0x7C00u;
  } else if (f < 113u << 23) {  // subnormal or zero in half
    const std::uint32_t magicBits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic, x;
    std::memcpy(&magic, &magicBits, 4);
    std::memcpy(&x, &f, 4);
    x += magic;
    std::memcpy(&f, &x, 4);
    out = f - magicBits;
  } else {
    const std::uint32_t odd = (f >> 13) & 1u;
    f += ((15u - 127u) << 23) + 0xFFFu + odd;
    out = f >> 13;
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}

std::size_t AdamW::add(std::string name, float* param, GradIn grad, std::size_t n, std::uint16_t* modelCopy,
                       ModelCopy copy, std::size_t tensorNumel) {
  RP_CHECK((modelCopy != nullptr) == (copy != ModelCopy::kNone), "AdamW::add: a model copy needs its dtype");
  const bool decay = optim::decays(name, config_.noDecay);
  const bool eightBit = config_.stateBits == 8 && eightBitStates(name, tensorNumel != 0 ? tensorNumel : n);
  Param p{std::move(name), param, grad, n, {}, {}, {}, {}, {}, {}, {}, modelCopy, copy, decay};
  p.eightBit = eightBit;
  if (eightBit) {
    p.codesM = parallel::ZeroedBytes(n, threads_);
    p.codesV = parallel::ZeroedBytes(n, threads_);
    p.absmaxM = parallel::ZeroedFloats(q8::blocksOf(n), threads_);
    p.absmaxV = parallel::ZeroedFloats(q8::blocksOf(n), threads_);
  } else {
    p.expAvg = parallel::ZeroedFloats(n, threads_);
    p.expAvgSq = parallel::ZeroedFloats(n, threads_);
    if (config_.amsgrad) p.maxExpAvgSq = parallel::ZeroedFloats(n, threads_);
  }
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

std::size_t AdamW::addSplit(std::string name, std::uint16_t* weights, std::uint16_t* low, GradIn grad, std::size_t n,
                            std::size_t tensorNumel) {
  RP_CHECK(weights != nullptr && low != nullptr, "AdamW::addSplit: a split master needs its weights and low words");
  const std::size_t i = add(std::move(name), nullptr, grad, n, weights, ModelCopy::kBFloat16, tensorNumel);
  params_[i].masterLow = low;
  return i;
}

void AdamW::readMaster(std::size_t i, float* out) const {
  const Param& p = params_[i];
  RP_CHECK(p.masterLow != nullptr, "AdamW::readMaster: {} is not a split master", p.name);
  const float* v = p.expAvgSq.data();                   // null for 8-bit moments, whose masters have no tie bits
  const int parts = parallel::partsFor(p.n, threads_);  // Note [Optimizer threads]
  parallel::forEachPart(parts, [&](int part) {
    const auto [begin, end] = parallel::partOf(p.n, part, parts);
    for (std::size_t k = begin; k < end; ++k) {
      out[k] = joinMaster(p.modelCopy[k], p.masterLow[k], v != nullptr && tieBit(v[k]));
    }
  });
}

void AdamW::writeMaster(std::size_t i, const float* in) {
  Param& p = params_[i];
  RP_CHECK(p.masterLow != nullptr, "AdamW::writeMaster: {} is not a split master", p.name);
  float* v = p.expAvgSq.data();
  const int parts = parallel::partsFor(p.n, threads_);
  parallel::forEachPart(parts, [&](int part) {
    const auto [begin, end] = parallel::partOf(p.n, part, parts);
    for (std::size_t k = begin; k < end; ++k) {
      const bool tie = splitMaster(in[k], p.modelCopy[k], p.masterLow[k]);
      if (v != nullptr) {
        v[k] = withTieBit(v[k], tie);
      } else if (tie) {
        p.masterLow[k] = 0x8001;  // Note [8-bit split master]
      }
    }
  });
}

std::vector<std::size_t> AdamW::takeTieBits(std::size_t i) {
  return params_[i].masterLow != nullptr && !eightBit(i)
             ? scanTieBits(params_[i].expAvgSq.data(), params_[i].n, threads_)
             : std::vector<std::size_t>{};
}

std::vector<std::size_t> AdamW::tieBits(std::size_t i) const {
  return params_[i].masterLow != nullptr && !eightBit(i)
             ? scanTieBits(params_[i].expAvgSq.data(), params_[i].n, threads_)
             : std::vector<std::size_t>{};
}

void AdamW::setTieBits(std::size_t i, const std::vector<std::size_t>& at) {
  float* v = params_[i].expAvgSq.data();
  for (const std::size_t k : at) v[k] = withTieBit(v[k], true);
}

AdamWSlice AdamW::slice(Param& p, std::size_t begin, std::size_t end) {
  return AdamWSlice{p.param != nullptr ? p.param + begin : nullptr,
                    p.grad.from(begin),
                    p.expAvg.data() + begin,
                    p.expAvgSq.data() + begin,
                    config_.amsgrad ? p.maxExpAvgSq.data() + begin : nullptr,
                    end - begin,
                    p.modelCopy != nullptr ? p.modelCopy + begin : nullptr,
                    p.copy,
                    p.masterLow != nullptr ? p.masterLow + begin : nullptr};
}

AdamW8Slice AdamW::slice8(Param& p, std::size_t begin, std::size_t end) {
  return AdamW8Slice{p.param != nullptr ? p.param + begin : nullptr,
                     p.grad.from(begin),
                     p.codesM.data() + begin,
                     p.codesV.data() + begin,
                     p.absmaxM.data() + begin / q8::kBlock,
                     p.absmaxV.data() + begin / q8::kBlock,
                     end - begin,
                     p.modelCopy != nullptr ? p.modelCopy + begin : nullptr,
                     p.copy,
                     p.masterLow != nullptr ? p.masterLow + begin : nullptr};
}

void AdamW::setThreads(int threads) {
  RP_CHECK(threads >= 1, "AdamW threads must be >= 1, got {}", threads);
  threads_ = threads;
}

AdamW::Step AdamW::beginStep(double lr, float gradScale) {
  ++step_;
  Step s;
  s.decayed = stepScalars(config_, lr, step_);
  s.decayed.gradScale = gradScale;
  s.plain = s.decayed;
  s.plain.decay = 1.0f;  // torch skips the multiplication for a group with weight_decay 0; by 1 it is exact
  return s;
}

void AdamW::update(const Step& step, const std::vector<std::size_t>& params) {
  // Part t of every parameter goes to thread t (common/parallel.h: cache lines are never shared).
  std::size_t elements = 0;
  for (const std::size_t i : params) elements += params_[i].n;
  const int parts = parallel::partsFor(elements, threads_);
  parallel::forEachPart(parts, [&](int part) {
    for (const std::size_t i : params) {
      Param& p = params_[i];
      const AdamWStepScalars& scalars = p.decay ? step.decayed : step.plain;
      if (p.eightBit) {  // 8-bit moments: parts of whole blocks (Note [8-bit states])
        const auto [begin, end] = parallel::partOf(p.n, part, parts, q8::kBlock);
        if (begin < end) kernel8_(scalars, slice8(p, begin, end));
        continue;
      }
      const auto [begin, end] = parallel::partOf(p.n, part, parts);
      if (begin < end) kernel_(scalars, config_.amsgrad, slice(p, begin, end));
    }
  });
}

void AdamW::step(double lr, float gradScale) {
  std::vector<std::size_t> all(params_.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  update(beginStep(lr, gradScale), all);
}

}  // namespace rp::optim
