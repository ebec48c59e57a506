// Host passes split among threads: the optimizer's AdamW update, gradient norm and clipping, and the dtype
// conversions between the node store and its float32 buffers (Note [Optimizer threads]: every pass is
// elementwise or sums in fixed blocks, so no result depends on the thread count), and the random init's chunks
// (Note [Parallel random init]), and the zeroing of the large buffers a run sets up (Note [Parallel first touch]).
// Thread-safety: the functions are reentrant; forEachPart's callback runs on several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>

namespace rp::parallel {

// The cores this process may run on (its CPU affinity: mpirun's binding, a cgroup's cpuset), at least 1.
int availableCores();

// A rank's optimizer threads: `configured` where > 0 (optim.threads), else the available cores shared among the
// node's `ranksOnNode` ranks, at least 1.
int optimizerThreads(int configured, int ranksOnNode);

// Note [Optimizer priority]: lowers the calling thread's scheduling priority by `nice` (Linux: per thread; the
// threads it creates afterwards, forEachPart's among them, inherit it), so that whenever a thread of the
// process's own priority is runnable it takes the core. Returns false, changing nothing, where the system
// refuses.
bool lowerThisThreadsPriority(int nice);
// The calling thread's nice value (its scheduling priority; higher is lower).
int thisThreadsNice();

// Part `part` of `parts` contiguous parts of [0, n), boundaries at multiples of `grain` elements (16 floats: a
// cache line is never written by two threads); the last part takes the rest.
std::pair<std::size_t, std::size_t> partOf(std::size_t n, int part, int parts, std::size_t grain = 16);

// How many parts a pass over `elements` elements uses with `threads` threads: each part at least 256 Ki
// elements (below that a thread's start costs more than its share of the pass), at most `threads`.
int partsFor(std::size_t elements, int threads);

// Runs fn(part) for every part in [0, parts): part 0 on the calling thread, each other on a thread of its own —
// the calling thread's pool, kept between calls (Note [Part threads]); returns when all have. `fn` must not throw.
void forEachPart(int parts, const std::function<void(int part)>& fn);

// Writes zeros to [data, data + bytes) on up to `threads` threads, in page-aligned parts. On memory not touched
// before this is also its first touch, which the kernel pays for page by page (Note [Parallel first touch]).
void fillZero(void* data, std::size_t bytes, int threads);

// `n` values of T (float, or the bytes of 8-bit optimizer states), all zero, allocated without a serial first
// touch: fillZero on `threads` threads (Note [Parallel first touch]). Owns its memory; moves, never copies.
template <typename T>
class Zeroed {
 public:
  Zeroed() = default;
  Zeroed(std::size_t n, int threads) : size_(n) {
    if (n == 0) return;
    data_.reset(static_cast<T*>(allocateZeroed(n * sizeof(T), threads)));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }

 private:
  // malloc'd and zeroed by fillZero; a SystemError naming the size where the host is out of memory.
  static void* allocateZeroed(std::size_t bytes, int threads);
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> data_;
  std::size_t size_ = 0;
};
using ZeroedFloats = Zeroed<float>;
using ZeroedBytes = Zeroed<std::uint8_t>;

}  // namespace rp::parallel
