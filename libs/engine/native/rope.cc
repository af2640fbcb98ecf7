// Rotary position embedding, Hugging Face "rotate_half" convention: the head dimension is split
// into halves (x1, x2) = (x[:D/2], x[D/2:]) and rotated as (x1 cos - x2 sin, x2 cos + x1 sin).
// The position of a node is its depth in the tree, so every root-to-leaf path sees exactly the
// positions it would see as a flat sequence.
#include "common.h"
#include "kernels.h"

namespace anvil {

namespace {
// sign = +1 for the forward rotation, -1 for its inverse (the transpose, used by the backward)
void rope_apply(float* qkv, const int32_t* depth, const float* cos_t, const float* sin_t, int N, int H, int KVH, int D,
                float sign) {
  const int half = D / 2, QKV = (H + 2 * KVH) * D, heads = H + KVH;  // q and k heads are adjacent
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* c = cos_t + (size_t)depth[n] * half;
    const float* s = sin_t + (size_t)depth[n] * half;
    for (int h = 0; h < heads; h++) {
      float* x = qkv + (size_t)n * QKV + (size_t)h * D;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half], si = sign * s[i];
        x[i] = x1 * c[i] - x2 * si;
        x[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}
}  // namespace

void rope_forward(float* qkv, const int32_t* depth, const float* cos_t, const float* sin_t, int N, int H, int KVH, int D) {
  rope_apply(qkv, depth, cos_t, sin_t, N, H, KVH, D, 1.0f);
}

void rope_backward(float* dqkv, const int32_t* depth, const float* cos_t, const float* sin_t, int N, int H, int KVH,
                   int D) {
  rope_apply(dqkv, depth, cos_t, sin_t, N, H, KVH, D, -1.0f);
}

}  // namespace anvil
