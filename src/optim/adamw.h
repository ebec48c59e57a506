// AdamW over contiguous fp32 host buffers (torch-free). The scalar kernel is the readable specification and
// reproduces torch.optim.AdamW (single-tensor path) operation by operation in float32; faster kernels
// (SIMD/OpenMP) plug in as another AdamWKernel and are tested against it.
// Thread-safety: an AdamW instance is used by one thread at a time; distinct slices of one buffer may be
// stepped from different threads (the kernel touches only [offset, offset + n)).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/parallel.h"

namespace rp::optim {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
  bool amsgrad = false;
  // Parameters whose lowercased name one of these regular expressions (ECMAScript, searched anywhere in it)
  // matches take no weight decay: Hugging Face Trainer's convention (get_decay_parameter_names) by default,
  // config/schema.cpp. Empty: every parameter decays.
  std::vector<std::string> noDecay;
  // 32, or 8: AdamW's moments as bitsandbytes' 8-bit blockwise states (Note [8-bit states], optim/blockwise8.cpp)
  // for the parameters eightBitStates admits; the others keep 32-bit moments.
  int stateBits = 32;
};

// Why `pattern` is not a regular expression AdamWConfig::noDecay can use, or nullopt when it is.
std::optional<std::string> patternError(const std::string& pattern);
// Whether `name` takes weight decay under `noDecay` (AdamWConfig::noDecay).
bool decays(const std::string& name, const std::vector<std::string>& noDecay);
// The fewest elements a tensor with 8-bit moments has: bitsandbytes' min_8bit_size.
inline constexpr std::size_t kMinEightBitElements = 4096;
// Whether a parameter keeps 8-bit moments where optim.state_bits is 8: bitsandbytes' rule (kMinEightBitElements or
// more) and its advice to keep embeddings in 32 bits, with the LM head beside them: a name holding
// "embed" or "lm_head" keeps 32-bit moments.
bool eightBitStates(const std::string& name, std::size_t n);
// The bytes of one tensor's moments: 8 a parameter (12 with amsgrad), or with stateBits 8 where eightBitStates
// admits it 2 and 8 a block of 256 (the absmax of m and v). For the host-memory checks.
double momentBytes(const std::string& name, std::size_t n, int stateBits, bool amsgrad);

// The per-step scalars every element uses, computed once in double like torch does.
struct AdamWStepScalars {
  float decay;          // 1 - lr * weight_decay
  float beta1;          // the 8-bit update's (bitsandbytes': m = m * beta1 + (1 - beta1) * g)
  float oneMinusBeta1;  // lerp weight
  float beta2;
  float oneMinusBeta2;
  float stepSize;             // lr / (1 - beta1^t)
  float biasCorrection2Sqrt;  // sqrt(1 - beta2^t)
  float eps;
  // What every gradient is multiplied by as it is read (Note [Clipping in the update]): the gradient-norm
  // clipping coefficient, 1 when no clipping applies.
  float gradScale = 1.0f;
};

AdamWStepScalars stepScalars(const AdamWConfig& config, double lr, std::int64_t step);

// The model-dtype copy a kernel writes in the same pass as the update (bf16/fp16 runs keep fp32 masters
// and a rounded model copy): round to nearest even, as LibTorch's float -> bfloat16 / half conversions.
enum class ModelCopy { kNone, kBFloat16, kFloat16 };

// Where a kernel reads a parameter's gradient (Note [Gradients read in place], engine/optimizer_worker.cpp):
// float32 values, or the widened sum of one or two bfloat16 gradient slots, the first plus the second (the
// widening pass's order: the deepest use first). Implicit from a float pointer: most callers hold float32 ones.
struct GradIn {
  const float* f32 = nullptr;
  const std::uint16_t* bf16[2] = {nullptr, nullptr};

  GradIn() = default;
  GradIn(const float* values) : f32(values) {}  // NOLINT(google-explicit-constructor)
  GradIn(const std::uint16_t* first, const std::uint16_t* second) : bf16{first, second} {}
  bool empty() const { return f32 == nullptr && bf16[0] == nullptr; }
  // The gradient from element `from` on.
  GradIn from(std::size_t offset) const;
  float at(std::size_t i) const;
};

// One element range of one tensor. maxExpAvgSq is null unless amsgrad; modelCopy is null unless copy != kNone.
// A split master (masterLow set; Note [Split master]): param is null, copy is kBFloat16, the master is
// joinMaster(modelCopy[i], masterLow[i], the sign bit of expAvgSq[i]) and the kernel writes it back split.
struct AdamWSlice {
  float* param;
  GradIn grad;
  float* expAvg;
  float* expAvgSq;
  float* maxExpAvgSq;
  std::size_t n;
  std::uint16_t* modelCopy = nullptr;
  ModelCopy copy = ModelCopy::kNone;
  std::uint16_t* masterLow = nullptr;
};

using AdamWKernel = void (*)(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& slice);

// One range of a parameter with 8-bit moments (Note [8-bit states]): whole blocks of q8::kBlock elements from a
// block boundary, the last short only at the tensor's end; absmaxM / absmaxV hold one value per block. A split
// master as in AdamWSlice (param null, masterLow set), its tie rounded up stored one float32 ulp away (Note
// [8-bit split master]).
struct AdamW8Slice {
  float* param;
  GradIn grad;
  std::uint8_t* m;
  std::uint8_t* v;
  float* absmaxM;
  float* absmaxV;
  std::size_t n;
  std::uint16_t* modelCopy = nullptr;
  ModelCopy copy = ModelCopy::kNone;
  std::uint16_t* masterLow = nullptr;
};

using AdamW8Kernel = void (*)(const AdamWStepScalars& s, const AdamW8Slice& slice);

// The scalar 8-bit kernel: bitsandbytes' update ("adam" in optimizer_update_8bit_blockwise) block by block.
void adamw8Scalar(const AdamWStepScalars& s, const AdamW8Slice& slice);

// The scalar reference kernel.
void adamwScalar(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& slice);

// float -> bfloat16 / IEEE half, round to nearest even (NaN -> quiet NaN), as LibTorch converts. The bfloat16
// pair is inline: the optimizer's conversion passes run them once per parameter (Note [Optimizer threads]).
inline std::uint16_t toBFloat16(float value) {
  if (std::isnan(value)) return 0x7FC0;
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
std::uint16_t toHalf(float value);
// The exact widening back to float (every bfloat16 / half value is a float).
inline float fromBFloat16(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}
float fromHalf(std::uint16_t bits);

inline GradIn GradIn::from(std::size_t offset) const {
  if (empty()) return {};
  if (f32 != nullptr) return GradIn(f32 + offset);
  return GradIn(bf16[0] + offset, bf16[1] != nullptr ? bf16[1] + offset : nullptr);
}
inline float GradIn::at(std::size_t i) const {
  if (f32 != nullptr) return f32[i];
  return bf16[1] != nullptr ? fromBFloat16(bf16[0][i]) + fromBFloat16(bf16[1][i]) : fromBFloat16(bf16[0][i]);
}

// Note [Split master]
// A bfloat16 run's float32 master x is kept as the bfloat16 weight the workers upload, w = toBFloat16(x),
// plus x's low 16 bits: 2 bytes a parameter instead of 4, and x restored bit for bit. Rounding to nearest even
// moves x's high half h by at most one: w = h + 1 exactly when the low half l is above 0x8000, or equal to it
// with h odd (a tie, rounded up to the even neighbour), else w = h; a carry into the exponent (up to infinity
// included) is the same integer step. So h = w - 1 for l > 0x8000 and h = w for l < 0x8000. At l = 0x8000 the
// low word cannot tell: an even w is reached from both h = w (down) and h = w - 1 (up) — 65,537 floats round to
// an even bfloat16, one more than 16 bits name — so one bit more says which: the tie bit, set for a tie
// rounded up. It lives in the sign bit of the element's AdamW second moment v, which is never negative
// (v = v·β2 + (1 − β2)·g² from +0), so the kernels carry it for free and clear it before using v. Infinities,
// subnormals and zeros of either sign go through unchanged; a NaN master (toBFloat16 gives 0x7FC0) comes back
// as a NaN, its sign and payload not kept, and a NaN v's sign is not kept either — a step that would make
// them is skipped as diverged before it updates (optim.mode docs). Tested over every high half with the low
// halves at and around each boundary, and kernel by kernel against the float32 master (tests/unit/
// test_adamw_split.cpp).
inline float joinMaster(std::uint16_t weight, std::uint16_t low, bool tieUp) {
  const bool up = low > 0x8000u || (low == 0x8000u && tieUp);
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::uint16_t>(weight - (up ? 1 : 0))) << 16 | low;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}
// The inverse: `weight` is toBFloat16(master); returns the tie bit.
inline bool splitMaster(float master, std::uint16_t& weight, std::uint16_t& low) {
  std::uint32_t bits;
  std::memcpy(&bits, &master, 4);
  weight = toBFloat16(master);
  low = static_cast<std::uint16_t>(bits);
  return low == 0x8000u && weight != static_cast<std::uint16_t>(bits >> 16);
}
// v's sign bit as the tie bit (Note [Split master]).
inline bool tieBit(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return (bits >> 31) != 0;
}
inline float withTieBit(float v, bool tie) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = (bits & 0x7FFFFFFFu) | (tie ? 0x80000000u : 0u);
  std::memcpy(&v, &bits, 4);
  return v;
}

// AdamW over registered fp32 tensors. Owns the moments; parameters and gradients stay where they are.
class AdamW {
 public:
  explicit AdamW(AdamWConfig config, AdamWKernel kernel = &adamwScalar, AdamW8Kernel kernel8 = &adamw8Scalar);

  // Registers a parameter of `n` floats; returns its index. Its name decides its weight decay (noDecay) and, with
  // stateBits 8, its moments' width (eightBitStates, of the whole tensor's `tensorNumel` elements where the
  // parameter is a part of it; 0: n). Buffers must outlive the optimizer. With a `modelCopy`, every step also writes
  // the updated parameter there rounded to `copy`'s dtype.
  std::size_t add(std::string name, float* param, GradIn grad, std::size_t n, std::uint16_t* modelCopy = nullptr,
                  ModelCopy copy = ModelCopy::kNone, std::size_t tensorNumel = 0);
  // Registers a split master (Note [Split master]): its bfloat16 weights and low words, which must hold
  // splitMaster of the starting master (a bfloat16 value: low words 0). Every step writes both.
  std::size_t addSplit(std::string name, std::uint16_t* weights, std::uint16_t* low, GradIn grad, std::size_t n,
                       std::size_t tensorNumel = 0);
  bool split(std::size_t i) const { return params_[i].masterLow != nullptr; }
  bool eightBit(std::size_t i) const { return params_[i].eightBit; }
  // Split masters, for checkpoints, while no step runs (each on the optimizer's threads): the float32 masters of
  // parameter i into `out`; and from `in`, into its weights, low words and tie bits.
  void readMaster(std::size_t i, float* out) const;
  void writeMaster(std::size_t i, const float* in);
  // Clears parameter i's tie bits, so that expAvgSq(i) holds v alone (a checkpoint saves it), and returns where
  // they were set (about one element in 131,072); setTieBits puts them back.
  std::vector<std::size_t> takeTieBits(std::size_t i);
  std::vector<std::size_t> tieBits(std::size_t i) const;  // where they are set, leaving them
  void setTieBits(std::size_t i, const std::vector<std::size_t>& at);
  // Splits every step over `threads` threads (contiguous chunks of every parameter); 1 = the calling thread. Set it
  // before `add`: the moments of a parameter are zeroed on these threads (Note [Parallel first touch]).
  void setThreads(int threads);
  // One update of every parameter with learning rate `lr` (the schedule's value for this step), each gradient
  // multiplied by `gradScale` as it is read (optim::clipCoefficient; Note [Clipping in the update]).
  void step(double lr, float gradScale = 1.0f);
  // The same update in groups (Note [Update by layer], engine/optimizer_worker.cpp): beginStep counts the step
  // and fixes its scalars; update() then updates the parameters `params` (indices from add). Each parameter
  // once per step, in any grouping and order: the result is step()'s, bitwise.
  struct Step {
    AdamWStepScalars decayed, plain;  // plain: a parameter without weight decay
  };
  Step beginStep(double lr, float gradScale = 1.0f);
  void update(const Step& step, const std::vector<std::size_t>& params);

  std::int64_t stepCount() const { return step_; }
  const AdamWConfig& config() const { return config_; }
  std::size_t size() const { return params_.size(); }
  const std::string& name(std::size_t i) const { return params_[i].name; }
  bool decays(std::size_t i) const { return params_[i].decay; }
  const parallel::ZeroedFloats& expAvg(std::size_t i) const { return params_[i].expAvg; }
  // An 8-bit parameter's moments (empty otherwise): codes, one per element, and one absmax per block (Note [8-bit
  // states]); expAvg / expAvgSq are empty for it.
  parallel::ZeroedBytes& codesM(std::size_t i) { return params_[i].codesM; }
  parallel::ZeroedBytes& codesV(std::size_t i) { return params_[i].codesV; }
  parallel::ZeroedFloats& absmaxM(std::size_t i) { return params_[i].absmaxM; }
  parallel::ZeroedFloats& absmaxV(std::size_t i) { return params_[i].absmaxV; }
  const parallel::ZeroedBytes& codesM(std::size_t i) const { return params_[i].codesM; }
  const parallel::ZeroedBytes& codesV(std::size_t i) const { return params_[i].codesV; }
  const parallel::ZeroedFloats& absmaxM(std::size_t i) const { return params_[i].absmaxM; }
  const parallel::ZeroedFloats& absmaxV(std::size_t i) const { return params_[i].absmaxV; }
  const parallel::ZeroedFloats& expAvgSq(std::size_t i) const { return params_[i].expAvgSq; }
  // For checkpoints: the moments of parameter i (maxExpAvgSq is empty unless amsgrad; a split master's expAvgSq
  // carries its tie bits), and the step count.
  parallel::ZeroedFloats& expAvg(std::size_t i) { return params_[i].expAvg; }
  parallel::ZeroedFloats& expAvgSq(std::size_t i) { return params_[i].expAvgSq; }
  parallel::ZeroedFloats& maxExpAvgSq(std::size_t i) { return params_[i].maxExpAvgSq; }
  const parallel::ZeroedFloats& maxExpAvgSq(std::size_t i) const { return params_[i].maxExpAvgSq; }
  void restoreStepCount(std::int64_t steps) { step_ = steps; }

 private:
  struct Param {
    std::string name;
    float* param;
    GradIn grad;
    std::size_t n;
    parallel::ZeroedFloats expAvg, expAvgSq, maxExpAvgSq;  // zeroed on the optimizer's threads
    parallel::ZeroedBytes codesM, codesV;                  // 8-bit moments instead (Note [8-bit states])
    parallel::ZeroedFloats absmaxM, absmaxV;
    std::uint16_t* modelCopy;
    ModelCopy copy;
    bool decay;
    std::uint16_t* masterLow = nullptr;  // a split master (param null)
    bool eightBit = false;               // of the whole tensor, so an empty part of it too (Note [8-bit states])
  };
  AdamWSlice slice(Param& p, std::size_t begin, std::size_t end);
  AdamW8Slice slice8(Param& p, std::size_t begin, std::size_t end);
  AdamWConfig config_;
  AdamWKernel kernel_;
  AdamW8Kernel kernel8_;
  std::vector<Param> params_;
  std::int64_t step_ = 0;
  int threads_ = 1;
};

}  // namespace rp::optim
