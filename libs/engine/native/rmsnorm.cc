// RMSNorm as in Hugging Face LlamaRMSNorm: y = w * x / sqrt(mean(x^2) + eps), computed in f32.
#include <omp.h>

#include "common.h"
#include "kernels.h"

namespace anvil {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) {
  // out[N,C], rstd[N], inp[N,C], w[C]
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;
    float* y = out + (size_t)n * C;
    float ss = dot(x, x, C);
    float r = 1.0f / std::sqrt(ss / C + eps);
    rstd[n] = r;
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = w[c] * (x[c] * r);
  }
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd, int N,
                      int C) {
  // xhat = x * rstd;  dxhat = dout * w
  // dinp += rstd * (dxhat - xhat * mean(dxhat * xhat));  dw += sum_n dout * xhat
  int nt = nthreads();
  std::vector<float> dw_local(dw ? (size_t)nt * C : 0, 0.0f);  // per-thread partial dw, reduced below
#pragma omp parallel num_threads(nt)
  {
    float* dwl = dw ? dw_local.data() + (size_t)omp_get_thread_num() * C : nullptr;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float* x = inp + (size_t)n * C;
      const float* dy = dout + (size_t)n * C;
      float* dx = dinp + (size_t)n * C;
      float r = rstd[n];
      float m = 0.f;
#pragma omp simd reduction(+ : m)
      for (int c = 0; c < C; c++) m += dy[c] * w[c] * x[c] * r;
      m /= C;
      if (dwl) {
#pragma omp simd
        for (int c = 0; c < C; c++) {
          float xhat = x[c] * r;
          dx[c] += r * (dy[c] * w[c] - xhat * m);
          dwl[c] += dy[c] * xhat;
        }
      } else {
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * w[c] - x[c] * r * m);
      }
    }
  }
  if (dw)
    for (int t = 0; t < nt; t++) axpy(dw, 1.0f, dw_local.data() + (size_t)t * C, C);
}

}  // namespace anvil
