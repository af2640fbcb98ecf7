// Thread count and arena allocation.
#include <cblas.h>
#include <omp.h>

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
  size_t bytes = ((n * sizeof(float)) + 63) & ~size_t(63);
  if (bytes == 0) bytes = 64;
  data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!data_) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  if (zero) std::memset(data_, 0, bytes);
}

FloatArena::~FloatArena() { std::free(data_); }

}  // namespace anvil
