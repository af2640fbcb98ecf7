// SwiGLU MLP activation: h = silu(gate) * up, gate and up from one fused GEMM ([gate | up]).
#include "common.h"
#include "kernels.h"

namespace anvil {

void swiglu_forward(float* h, const float* gu, int N, int F) {
  // h[N,F], gu[N,2F]
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (size_t)n * 2 * F;
    const float* u = g + F;
    float* o = h + (size_t)n * F;
#pragma omp simd
    for (int i = 0; i < F; i++) {
      float sg = 1.0f / (1.0f + fast_exp(-g[i]));
      o[i] = g[i] * sg * u[i];
    }
  }
}

void swiglu_backward(float* dgu, const float* dh, const float* gu, int N, int F) {
  // d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g)))
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (size_t)n * 2 * F;
    const float* u = g + F;
    const float* d = dh + (size_t)n * F;
    float* dg = dgu + (size_t)n * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int i = 0; i < F; i++) {
      float sg = 1.0f / (1.0f + fast_exp(-g[i]));
      float silu = g[i] * sg;
      dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
      du[i] = d[i] * silu;
    }
  }
}

}  // namespace anvil
