// The kernels a stretch of LibTorch ops launches, counted from the ops the dispatcher runs (Note [Kernel counts]):
// what the emulated device charges its per-kernel floor for.
#pragma once

#include <string>
#include <vector>

#include <ATen/record_function.h>

namespace rp::engine {

// Note [Kernel counts]: while a KernelCount lives, the ops this thread dispatches (LibTorch's RecordFunction, its
// FUNCTION scope) are counted as a GPU would launch them: an op is a kernel when none of the ops it calls is one
// and it is not a view (every tensor it returns aliases an input without writing it), a factory that only
// allocates (empty, empty_like, empty_strided, new_empty*, resize_), or an op that returns no tensor (size,
// item's dense read); _unsafe_view, a view its schema does not mark, is none either. So a composite op (linear:
// t + addmm) is its kernels, a clone (empty_like + copy_) one, a view none. Records that are not ops count only
// when named "rp::..." (RECORD_FUNCTION) and calling no kernel: the emulated device's flash attention
// (model/attention.cpp) is the one kernel it stands for; autograd's own records (evaluate_function, detach) are
// not kernels. Autograd's backward of meta tensors runs on the
// calling thread, so a backward's ops are counted too. One KernelCount at a time per thread; the callback is
// this thread's only while one lives, so nothing is paid outside counting.
class KernelCount {
 public:
  KernelCount();
  ~KernelCount();
  KernelCount(const KernelCount&) = delete;
  KernelCount& operator=(const KernelCount&) = delete;
  int kernels() const;                          // counted so far
  const std::vector<std::string>& ops() const;  // their ops' names, in launch order ("aten::mm", "rp::...")

 private:
  at::CallbackHandle handle_;
};

}  // namespace rp::engine
