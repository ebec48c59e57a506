#include "engine/emulation.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <vector>

#include <torch/library.h>

#include "common/error.h"
#include "common/fmt.h"
#include "common/log.h"
#include "model/libtorch.h"
#include "schedule/projection.h"

namespace rp::engine {
namespace {

namespace fs = std::filesystem;

// ./cluster-configs, and the one of the source tree the executable was built from (build/src/cli/<tool> -> the
// directory above build/).
std::vector<fs::path> profileDirectories() {
  std::vector<fs::path> dirs{fs::current_path() / "cluster-configs"};
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      if (fs::is_directory(p / "cluster-configs")) {
        // Run from the source tree, both are the same directory: listed once.
        if (!fs::equivalent(p / "cluster-configs", dirs.front(), error)) dirs.push_back(p / "cluster-configs");
        break;
      }
    }
  }
  return dirs;
}

}  // namespace

std::string emulatedProfilePath(const config::RunConfig& c) {
  const std::string& name = c.pipeline.emulatedProfile;
  if (name.find('/') != std::string::npos || fs::path(name).extension() == ".toml") {
    if (!fs::is_regular_file(name)) {
      RP_THROW(InputError, "{}: pipeline.emulated_profile = \"{}\": no such file",
               c.values.source({"pipeline.emulated_profile"}), name);
    }
    return name;
  }
  std::string looked, known;
  for (const fs::path& dir : profileDirectories()) {
    const fs::path file = dir / (name + ".toml");
    if (fs::is_regular_file(file)) return file.string();
    looked += (looked.empty() ? "" : ", ") + dir.string();
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      if (entry.path().extension() == ".toml") known += (known.empty() ? "" : ", ") + entry.path().stem().string();
    }
  }
  RP_THROW(InputError, "{}: pipeline.emulated_profile = \"{}\": no {}.toml in {} (profiles there: {})",
           c.values.source({"pipeline.emulated_profile"}), name, name, looked, known.empty() ? "none" : known);
}

device::EmulatedDevice emulatedDevice(const config::RunConfig& c) {
  const std::string path = emulatedProfilePath(c);
  const schedule::Hardware h = schedule::loadHardware(path);
  device::EmulatedDevice d;
  d.profile = fs::path(path).stem().string();
  d.gpu = h.name;
  d.flopsPerSecond = h.tensorTflops * 1e12 * h.efficiency;
  d.linkBytesPerSecond = h.pcieGBs * 1e9 / h.gpusPerBridge;
  d.memoryBytes = h.memoryGb * 1e9;
  d.kernelSeconds = h.kernelFloorUs * 1e-6;
  d.hostTraffic = c.pipeline.emulatedHostTraffic;
  d.spinWaits = c.pipeline.emulatedWaits == "spin";
  d.pinned = c.pipeline.emulatedPinned;
  d.pageableBytesPerSecond = h.pageableGBs * 1e9 / h.gpusPerBridge;
  return d;
}

// Note [Emulated compute memory]: LibTorch gives a meta tensor's storage from the meta device's allocator, a
// null pointer of the tensor's size. While an emulated device is current, ours replaces it: the same null
// pointer, with the bytes held against that device (Worker::holdCompute) until the storage is freed, so the
// device knows what its compute would hold on the card — the memory report's job peak — and an allocation past
// what the card leaves fails as LibTorch's out-of-memory, which the executor names (Note [Out of worker
// memory]). One emulated device a process (a rank); storage made while none is current is not counted.
namespace {

std::atomic<device::Worker*> currentDevice{nullptr};
thread_local bool uncounted = false;

void releaseMeta(void* context) {
  if (device::Worker* worker = currentDevice.load()) worker->releaseCompute(reinterpret_cast<std::uintptr_t>(context));
}

void nothing(void*) {}

class CountingMetaAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    device::Worker* worker = currentDevice.load();
    if (worker == nullptr || uncounted || bytes == 0) return {nullptr, nullptr, &nothing, c10::Device(c10::kMeta)};
    TORCH_CHECK_WITH(OutOfMemoryError, worker->holdCompute(bytes), "emulated device: out of memory: tried to hold ",
                     bytes, " bytes more for the compute than the card leaves it (", worker->describe(), ")");
    return {nullptr, reinterpret_cast<void*>(static_cast<std::uintptr_t>(bytes)), &releaseMeta,
            c10::Device(c10::kMeta)};
  }
  void copy_data(void*, const void*, std::size_t) const override {}
};

void countMetaFor(device::Worker* worker) {
  static CountingMetaAllocator allocator;
  static const bool installed = [] {
    c10::SetAllocator(c10::kMeta, &allocator, /*priority=*/1);  // over LibTorch's own (priority 0)
    return true;
  }();
  (void)installed;
  currentDevice.store(worker);
}

}  // namespace

UncountedMeta::UncountedMeta() : previous_(uncounted) {
  uncounted = true;
}

UncountedMeta::~UncountedMeta() {
  uncounted = previous_;
}

EmulatedCompute::EmulatedCompute(device::Worker& worker, const PipelineModel& model)
    : worker_(worker),
      shape_(schedule::shapeOf(model.model().config())),
      frozen_(model.frozenBase()),
      layers_(model.layerCount()),
      active_(worker.modelsCompute()) {
  if (active_) countMetaFor(&worker_);
}

EmulatedCompute::~EmulatedCompute() {
  if (active_) countMetaFor(nullptr);
}

double EmulatedCompute::pairs(int l, const model::AttentionContext& context) const {
  const std::vector<std::int64_t>& offsets = context.documents.offsets;
  std::vector<std::int64_t> lengths;
  for (std::size_t d = 1; d < offsets.size(); ++d) lengths.push_back(offsets[d] - offsets[d - 1]);
  return schedule::attentionPairs(lengths, shape_.window(l - 1));  // pipeline layer l is decoder layer l - 1
}

void EmulatedCompute::at(int slot, std::string job) {
  slot_ = slot;
  job_ = std::move(job);
  inputs_.clear();
}

// Note [Kernel counts per layer]: each layer's phase is counted once, at its first run: its ops from its submission to
// the next submission or settle() (a backward's run from the hook that submits it to the next hook), so the glue a job
// dispatches after a layer (its loss's scaling, an activation made contiguous) counts with it, as it would run on
// the card's stream after it. That first run is charged no floor: submitted before its ops run, its count is not
// known yet, so step 1's device time lacks each phase's floor once (an understatement; the benchmarks and
// mpi.emulated_matches_sim time later steps). A job's first microbatch and its later ones are counted apart: on
// the later ones the weight gradients accumulate (an add each), on the first they are taken as computed. A
// mixture-of-experts layer is counted with the experts its first microbatch routed to.
void EmulatedCompute::submit(Counted counted, double flops, device::Access access) {
  settle();
  const auto known = kernels_.find(counted);
  if (known != kernels_.end() && flops <= 0 && known->second == 0) return;  // nothing for the device
  worker_.expectCompute({flops, known == kernels_.end() ? 0 : known->second});
  for (const auto& input : inputs_) access.reads.push_back(input);
  inputs_.clear();
  worker_.declareCompute(access);
  if (known == kernels_.end()) {
    counting_ = counted;
    count_ = std::make_unique<KernelCount>();
  }
}

void EmulatedCompute::settle() {
  if (!counting_) return;
  kernels_[*counting_] = count_->kernels();
  static constexpr const char* kPhases[] = {"forward", "forward with gradients", "backward"};
  RP_LOG_DEBUG("emulated device: layer {}'s {} on {} microbatch launches {} kernels: {}", counting_->layer,
               kPhases[static_cast<int>(counting_->phase)], counting_->accumulates ? "a later" : "a job's first",
               count_->kernels(), fmt::join(count_->ops(), " "));
  count_.reset();
  counting_.reset();
}

void EmulatedCompute::forward(int l, const model::AttentionContext& context, bool withGradients) {
  if (!active_) return;
  const auto tokens = static_cast<double>(context.documents.offsets.back());
  device::Access access;
  access.what = fmt::format("forward of layer {}, mb {}, {}", l, microbatch_, job_);
  access.reads.push_back({device::Region::Kind::kSlot, slot_});
  double flops = 0.0;  // the embedding's lookup: a gather
  if (l == layers_ - 1) {
    const schedule::LayerFlops head = schedule::headWork(shape_, tokens, frozen_);
    flops = withGradients ? head.forward + head.backward : head.forward;
    if (withGradients) access.writes.push_back({device::Region::Kind::kGradient, l});
  } else if (l > 0) {
    flops = schedule::decoderLayerWork(shape_, tokens, pairs(l, context), frozen_).forward;
  }
  submit({l, withGradients ? Phase::kForwardWithGradients : Phase::kForward, microbatch_ > 0}, flops,
         std::move(access));
}

EmulatedCompute::Backward EmulatedCompute::backwardWork(int l, const model::AttentionContext& context) const {
  Backward out;
  out.layer = l;
  out.accumulates = microbatch_ > 0;
  out.access.what = fmt::format("backward of layer {}, mb {}, {}", l, microbatch_, job_);
  out.access.reads.push_back({device::Region::Kind::kSlot, slot_});
  out.access.writes.push_back({device::Region::Kind::kGradient, l});
  if (l == 0 || l == layers_ - 1) return out;  // the embedding's scatter; the head's came with its forward
  const auto tokens = static_cast<double>(context.documents.offsets.back());
  out.flops = schedule::decoderLayerWork(shape_, tokens, pairs(l, context), frozen_).backward;
  return out;
}

void EmulatedCompute::backward(const Backward& b) {
  if (!active_) return;
  submit({b.layer, Phase::kBackward, b.accumulates}, b.flops,
         b.access);  // its slot as registered; the inputs fetched since
}

}  // namespace rp::engine

// Note [Meta kernels]: LibTorch's C++ build lacks meta kernels for a few ops our layers use (Python registers
// them in Python); the emulated device needs only their output shapes, given here.
namespace {

at::Tensor indexSelectMeta(const at::Tensor& self, std::int64_t dim, const at::Tensor& index) {
  std::vector<std::int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[static_cast<std::size_t>(c10::maybe_wrap_dim(dim, self.dim()))] = index.numel();
  return at::empty(sizes, self.options());
}

at::Tensor whereMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const auto sizes = at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  return at::empty(sizes, self.options().dtype(at::result_type(self, other)));
}

at::Tensor& whereOutMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                         at::Tensor& out) {
  out.resize_(at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes()));
  return out;
}

at::Tensor embeddingDenseBackwardMeta(const at::Tensor& grad, const at::Tensor&, c10::SymInt weights, c10::SymInt,
                                      bool) {
  return at::empty({weights.expect_int(), grad.size(-1)}, grad.options());
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("index_select", indexSelectMeta);
  m.impl("where.self", whereMeta);
  m.impl("where.self_out", whereOutMeta);
  m.impl("embedding_dense_backward", embeddingDenseBackwardMeta);
}

}  // namespace
