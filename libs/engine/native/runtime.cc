// Thread count and arena allocation.
#include <cblas.h>
#include <omp.h>

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "common.h"

namespace anvil {

namespace {
std::atomic<int> g_threads{2};
}

int nthreads() { return g_threads.load(std::memory_order_relaxed); }

void set_threads(int n) {
  if (n < 1 || n > 1024) throw Error("thread count must be between 1 and 1024, got " + std::to_string(n));
  g_threads.store(n);
  // OpenBLAS keeps its own pool; keep both at the same count so GEMMs and our OpenMP kernels
  // use the same cores and neither oversubscribes the other.
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
}

FloatArena::FloatArena(size_t n, bool zero) : size_(n) {
  // Large arenas are 2 MiB aligned and marked for transparent huge pages: first touch of a fresh
  // multi-hundred-MB arena otherwise page-faults every 4 KiB.
  const size_t huge = size_t(2) << 20;
  const size_t align = n * sizeof(float) >= 2 * huge ? huge : 64;
  size_t bytes = ((n * sizeof(float)) + align - 1) & ~(align - 1);
  if (bytes == 0) bytes = 64;
  data_ = static_cast<float*>(std::aligned_alloc(align, bytes));
  if (!data_) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
  if (align == huge) madvise(data_, bytes, MADV_HUGEPAGE);
#endif
  if (zero) std::memset(data_, 0, bytes);
}

FloatArena::~FloatArena() { std::free(data_); }

void FloatArena::discard() {
  // only the pages wholly inside this allocation: the allocator's bookkeeping around it is untouched
  const uintptr_t page = 4096, b = reinterpret_cast<uintptr_t>(data_), e = b + size_ * sizeof(float);
  const uintptr_t b2 = (b + page - 1) & ~(page - 1), e2 = e & ~(page - 1);
  if (e2 > b2) madvise(reinterpret_cast<void*>(b2), e2 - b2, MADV_DONTNEED);
}

}  // namespace anvil
