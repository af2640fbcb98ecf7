// Shared helpers for the CPU engine: errors, thread count, aligned arenas and the small
// vector primitives (dot, axpy, exp) that the hand-written kernels build on.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace anvil {

// Every failure inside the engine is an anvil::Error; the addon turns it into a JavaScript
// Error (thrown or rejected), so a bad input never takes the process down.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thread count for OpenMP regions and OpenBLAS. AsyncWorkers run on libuv pool threads whose
// OpenMP "nthreads" ICV is independent of the main thread's, so every parallel region names
// the count explicitly: `#pragma omp parallel for num_threads(nthreads())`.
int nthreads();
void set_threads(int n);

// A zero-initialised, 64-byte aligned float buffer. Arenas are allocated once (parameters,
// gradients, AdamW moments per model; activations per forward handle) and carved into tensors
// by pointer arithmetic, llm.c style, so no kernel allocates per token.
class FloatArena {
 public:
  explicit FloatArena(size_t n, bool zero = true);
  ~FloatArena();
  FloatArena(const FloatArena&) = delete;
  FloatArena& operator=(const FloatArena&) = delete;
  float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }
  // Returns the arena's whole pages to the operating system now (they read as zeros afterwards).
  // For an arena about to be dropped that JavaScript views may still co-own until they are
  // garbage-collected: the memory is released at once rather than at some later collection.
  void discard();

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

// Bump allocator over a FloatArena: the caller first counts (dry run with base == nullptr) and
// then allocates exactly that many floats, so the memory limit can be checked up front.
struct Bump {
  float* base = nullptr;
  size_t used = 0;
  float* take(size_t n) {
    float* p = base ? base + used : nullptr;
    used += (n + 15) & ~size_t(15);  // keep every tensor 64-byte aligned
    return p;
  }
};

inline float dot(const float* a, const float* b, int n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

// y += a * x
inline void axpy(float* y, float a, const float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

// exp(x) for float, branch-free so that loops over it vectorise (Cephes expf polynomial,
// relative error ~2e-7). std::exp does not vectorise without -ffast-math, and the softmaxes
// of attention and of the LM head evaluate billions of exponentials per step.
#pragma omp declare simd
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace anvil
