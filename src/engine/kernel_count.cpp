#include "engine/kernel_count.h"

#include <memory>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace rp::engine {
namespace {

// This thread's count: the kernels counted so far, and per open op, the count when it began and whether it
// would be a kernel itself.
struct Counting {
  bool active = false;
  std::vector<std::string> kernels;
  struct Open {
    std::size_t kernelsBefore;
    bool kernel;
  };
  std::vector<Open> open;
};
thread_local Counting counting;

bool allocatesOnly(std::string_view name) {
  return name == "aten::empty" || name == "aten::empty_like" || name == "aten::empty_strided" ||
         name == "aten::new_empty" || name == "aten::new_empty_strided" || name == "aten::resize_" ||
         name == "aten::_unsafe_view";  // a view its schema does not mark
}

// Whether the op would launch a kernel if it called none (Note [Kernel counts]).
bool kernelOp(const at::RecordFunction& fn) {
  const std::optional<c10::FunctionSchema> schema = fn.operator_schema();
  if (!schema) return std::string_view(fn.name()).rfind("rp::", 0) == 0;  // our named regions; not autograd's
  if (allocatesOnly(schema->name())) return false;
  bool tensors = false, fresh = false;
  for (const c10::Argument& out : schema->returns()) {
    const c10::TypePtr& type = out.type();
    const bool tensor =
        type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::ListType && type->containedType(0)->kind() == c10::TypeKind::TensorType) ||
        (type->kind() == c10::TypeKind::OptionalType && type->containedType(0)->kind() == c10::TypeKind::TensorType);
    if (!tensor) continue;
    tensors = true;
    if (out.alias_info() == nullptr || out.alias_info()->isWrite()) fresh = true;
  }
  return tensors && fresh;
}

std::unique_ptr<at::ObserverContext> opened(const at::RecordFunction& fn) {
  if (counting.active) counting.open.push_back({counting.kernels.size(), kernelOp(fn)});
  return nullptr;
}

void closed(const at::RecordFunction& fn, at::ObserverContext*) {
  if (!counting.active || counting.open.empty()) return;
  const Counting::Open op = counting.open.back();
  counting.open.pop_back();
  if (op.kernel && counting.kernels.size() == op.kernelsBefore) counting.kernels.emplace_back(fn.name());
}

}  // namespace

KernelCount::KernelCount() {
  RP_CHECK(!counting.active, "KernelCount: one at a time on a thread");
  counting = Counting{};
  counting.active = true;
  handle_ =
      at::addThreadLocalCallback(at::RecordFunctionCallback(&opened, &closed).scopes({at::RecordScope::FUNCTION}));
}

KernelCount::~KernelCount() {
  at::removeCallback(handle_);
  counting = Counting{};
}

int KernelCount::kernels() const {
  return static_cast<int>(counting.kernels.size());
}

const std::vector<std::string>& KernelCount::ops() const {
  return counting.kernels;
}

}  // namespace rp::engine
