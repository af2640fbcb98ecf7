// AdamW (Loshchilov & Hutter) with PyTorch's semantics: decoupled weight decay applied to the
// parameter before the Adam update, bias-corrected moments, eps added after the square root.
// It streams 28 bytes per parameter; built with -fno-math-errno so that sqrt vectorises.
#include "common.h"
#include "kernels.h"

namespace anvil {

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t) {
  const float inv_bc1 = (float)(1.0 / (1.0 - std::pow((double)beta1, t)));
  const float inv_bc2 = (float)(1.0 / (1.0 - std::pow((double)beta2, t)));
  const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd num_threads(nthreads()) schedule(static)
  for (size_t i = 0; i < n; i++) {
    float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
    float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    p[i] = p[i] * decay - lr * mhat / (std::sqrt(vhat) + eps);
  }
}

double sum_squares(const float* x, size_t n) {
  double s = 0.0;
#pragma omp parallel for simd num_threads(nthreads()) reduction(+ : s) schedule(static)
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

void scale_inplace(float* x, size_t n, float s) {
#pragma omp parallel for simd num_threads(nthreads()) schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

}  // namespace anvil
