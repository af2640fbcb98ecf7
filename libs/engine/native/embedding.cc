// Token embedding lookup and its scatter-add backward.
#include <omp.h>

#include "common.h"
#include "kernels.h"

namespace anvil {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  // out[N,C] = wte[tokens[n], :]
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) std::memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, sizeof(float) * C);
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) {
  // Repeated tokens hit the same row, so split the columns (not the rows) across threads.
#pragma omp parallel num_threads(nthreads())
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int c0 = (int)((int64_t)C * t / nt), c1 = (int)((int64_t)C * (t + 1) / nt);
    for (int n = 0; n < N; n++) {
      float* dst = dwte + (size_t)tokens[n] * C;
      const float* src = dout + (size_t)n * C;
      for (int c = c0; c < c1; c++) dst[c] += src[c];
    }
  }
}

}  // namespace anvil
