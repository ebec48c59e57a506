#include "model/batch.h"

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::model {

model::Batch toBatch(const std::vector<data::PackedRow>& rows, std::size_t begin, std::size_t end) {
  RP_CHECK(begin < end && end <= rows.size(), "row range [{}, {}) of {}", begin, end, rows.size());
  const auto n = static_cast<std::int64_t>(end - begin);
  const auto T = static_cast<std::int64_t>(rows[begin].inputIds.size());
  auto gather = [&](auto member) {
    auto t = torch::empty({n, T}, torch::kInt64);
    auto acc = t.accessor<std::int64_t, 2>();
    for (std::int64_t r = 0; r < n; ++r) {
      const auto& v = rows[begin + static_cast<std::size_t>(r)].*member;
      RP_CHECK(static_cast<std::int64_t>(v.size()) == T, "row {} has {} tokens, expected {}", r, v.size(), T);
      for (std::int64_t i = 0; i < T; ++i) acc[r][i] = v[static_cast<std::size_t>(i)];
    }
    return t;
  };
  model::Batch batch;
  batch.inputIds = gather(&data::PackedRow::inputIds);
  batch.positionIds = gather(&data::PackedRow::positions);
  batch.segmentIds = gather(&data::PackedRow::segments);
  batch.targets = gather(&data::PackedRow::targets);
  static_assert(data::kNoTarget == model::kIgnoreIndex, "packer and loss agree on the ignore index");
  return batch;
}

namespace {
// To a GPU from pinned memory without blocking the host: the copy is ordered on the current stream (the
// worker's compute stream, which the caller entered) and the pinned buffer is kept until it lands (LibTorch's
// caching host allocator records the stream).
torch::Tensor onDevice(const torch::Tensor& t, torch::Device device) {
  if (!t.defined() || t.device() == device) return t;
  if (device.is_cuda() && t.is_cpu()) return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
}
}  // namespace

Batch toDevice(const Batch& b, torch::Device device) {
  return {onDevice(b.inputIds, device), onDevice(b.positionIds, device), onDevice(b.segmentIds, device),
          onDevice(b.targets, device)};
}

AttentionContext toDevice(const AttentionContext& c, torch::Device device) {
  AttentionContext out = c;
  out.cos = onDevice(c.cos, device);
  out.sin = onDevice(c.sin, device);
  out.slidingCos = onDevice(c.slidingCos, device);
  out.slidingSin = onDevice(c.slidingSin, device);
  out.documents.cumulative = onDevice(c.documents.cumulative, device);
  return out;
}

}  // namespace rp::model
