// All GEMMs go through OpenBLAS. Activations are row-major [N, in]; weights are [out, in]
// (PyTorch / safetensors layout), so the forward is x @ W^T and no weight is ever transposed.
#include <cblas.h>

#include <omp.h>

#include "common.h"
#include "kernels.h"

namespace anvil {

void matmul_forward(float* out, const float* inp, const float* w, int N, int I, int O, bool accumulate) {
  // out[N,O] = inp[N,I] @ w[O,I]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, I, 1.0f, inp, I, w, I, accumulate ? 1.0f : 0.0f, out, O);
}

void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int I, int O,
                     bool accumulate_dinp) {
  if (dinp) {
    // dinp[N,I] = dout[N,O] @ w[O,I]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, I, O, 1.0f, dout, O, w, I, accumulate_dinp ? 1.0f : 0.0f,
                dinp, I);
  }
  // dw[O,I] += dout[N,O]^T @ inp[N,I] (skipped for a frozen weight)
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, I, N, 1.0f, dout, O, inp, I, 1.0f, dw, I);
}

void bias_fill(float* out, const float* bias, int N, int O) {
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) std::memcpy(out + (size_t)n * O, bias, sizeof(float) * O);
}

void bias_backward(float* dbias, const float* dout, int N, int O) {
  // columns split across threads: each thread owns a slice of dbias, so there is no race
#pragma omp parallel num_threads(nthreads())
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int c0 = (int)((int64_t)O * t / nt), c1 = (int)((int64_t)O * (t + 1) / nt);
    for (int n = 0; n < N; n++) {
      const float* row = dout + (size_t)n * O;
      for (int c = c0; c < c1; c++) dbias[c] += row[c];
    }
  }
}

}  // namespace anvil
