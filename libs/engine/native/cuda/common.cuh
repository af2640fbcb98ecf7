// Error handling shared by the CUDA sources: every CUDA failure becomes an anvil::Error (which the
// addon turns into a JavaScript Error), never an abort.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../common.h"

namespace anvil {
namespace cuda {

inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA error in ") + what + " (" + file + ":" + std::to_string(line) +
              "): " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

#define ANVIL_CUDA(call)                                                   \
  do {                                                                     \
    cudaError_t anvil_e_ = (call);                                         \
    if (anvil_e_ != cudaSuccess) ::anvil::cuda::throw_cuda(anvil_e_, #call, __FILE__, __LINE__); \
  } while (0)

inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// Bump allocator over bytes, 256-byte aligned pieces (what cuBLASLt and vector loads like); a dry
// run (base == nullptr) counts, so a caller sizes one allocation before making it.
struct ByteBump {
  char* base = nullptr;
  size_t used = 0;
  template <typename T>
  T* take(size_t n) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += (n * sizeof(T) + 255) & ~size_t(255);
    return p;
  }
};

}  // namespace cuda
}  // namespace anvil
