// Tree attention. Node j may attend to node i iff i is an ancestor of j or i == j, so the keys
// visible to j are exactly its root-to-j path (depth[j] + 1 nodes). Instead of an N x N mask we
// walk that path: the work is sum over nodes of (depth + 1), which for a wide tree is far less
// than N^2, and for a single chain equals causal attention.
//
// The forward keeps only out[N,H*D] and the log-sum-exp lse[N,H]; the backward recomputes the
// probabilities from lse (as FlashAttention does), so no N x depth matrix is ever stored.
// Grouped-query attention: query head h reads key/value head h / (H / KVH), as transformers'
// repeat_kv does.
//
// The inner loops work on row-pointer lists (the path's key rows, or a subtree's query rows), four
// dot products at a time and with the output row held in registers, because a 64-wide dot product
// alone is latency-bound. AVX2 versions are used when D is a multiple of 8; the plain loops are
// the reference and the fallback.
#include <omp.h>

#include <algorithm>

#include "common.h"
#include "kernels.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ANVIL_AVX2 1
#endif

namespace anvil {

namespace {

#ifdef ANVIL_AVX2
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// out[r] = scale * (a . b[r]) for r < cnt
inline void dot_rows(float* out, const float* a, const float* const* b, int cnt, int D, float scale) {
  int r = 0;
#ifdef ANVIL_AVX2
  if ((D & 7) == 0) {
    for (; r + 4 <= cnt; r += 4) {
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      const float *b0 = b[r], *b1 = b[r + 1], *b2 = b[r + 2], *b3 = b[r + 3];
      for (int d = 0; d < D; d += 8) {
        __m256 av = _mm256_loadu_ps(a + d);
        s0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b0 + d), s0);
        s1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b1 + d), s1);
        s2 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b2 + d), s2);
        s3 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b3 + d), s3);
      }
      out[r] = hsum8(s0) * scale;
      out[r + 1] = hsum8(s1) * scale;
      out[r + 2] = hsum8(s2) * scale;
      out[r + 3] = hsum8(s3) * scale;
    }
  }
#endif
  for (; r < cnt; r++) out[r] = dot(a, b[r], D) * scale;
}

// y[D] += sum_r w[r] * x[r][D]
inline void axpy_rows(float* y, const float* w, const float* const* x, int cnt, int D) {
#ifdef ANVIL_AVX2
  if ((D & 7) == 0) {
    int d0 = 0;
    for (; d0 + 32 <= D; d0 += 32) {  // four registers of y stay live across all rows
      __m256 y0 = _mm256_loadu_ps(y + d0), y1 = _mm256_loadu_ps(y + d0 + 8), y2 = _mm256_loadu_ps(y + d0 + 16),
             y3 = _mm256_loadu_ps(y + d0 + 24);
      for (int r = 0; r < cnt; r++) {
        const __m256 wb = _mm256_set1_ps(w[r]);
        const float* xr = x[r] + d0;
        y0 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(xr), y0);
        y1 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(xr + 8), y1);
        y2 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(xr + 16), y2);
        y3 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(xr + 24), y3);
      }
      _mm256_storeu_ps(y + d0, y0);
      _mm256_storeu_ps(y + d0 + 8, y1);
      _mm256_storeu_ps(y + d0 + 16, y2);
      _mm256_storeu_ps(y + d0 + 24, y3);
    }
    for (; d0 < D; d0 += 8) {
      __m256 y0 = _mm256_loadu_ps(y + d0);
      for (int r = 0; r < cnt; r++) y0 = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), _mm256_loadu_ps(x[r] + d0), y0);
      _mm256_storeu_ps(y + d0, y0);
    }
    return;
  }
#endif
  for (int r = 0; r < cnt; r++) axpy(y, w[r], x[r], D);
}

// ancestors of j from the root down to j itself: path[0] = root, path[depth[j]] = j
inline int fill_path(int32_t* path, const TreeInfo& tree, int j) {
  int len = tree.depth[j] + 1;
  int a = j;
  for (int t = len - 1; t >= 0; t--) {
    path[t] = a;
    a = tree.parent[a];
  }
  return len;
}

}  // namespace

void tree_attention_forward(float* out, float* lse, const float* qkv, const TreeInfo& tree, int H, int KVH, int D) {
  const int N = tree.n, QKV = (H + 2 * KVH) * D, G = H / KVH, L = tree.max_depth + 1;
  const float scale = 1.0f / std::sqrt((float)D);
#pragma omp parallel num_threads(nthreads())
  {
    std::vector<int32_t> path(L);
    std::vector<const float*> kp(L), vp(L);
    std::vector<float> s(L);
#pragma omp for schedule(dynamic, 4)
    for (int j = 0; j < N; j++) {
      const int len = fill_path(path.data(), tree, j);
      for (int kvh = 0; kvh < KVH; kvh++) {
        for (int t = 0; t < len; t++) {
          kp[t] = qkv + (size_t)path[t] * QKV + (size_t)(H + kvh) * D;
          vp[t] = qkv + (size_t)path[t] * QKV + (size_t)(H + KVH + kvh) * D;
        }
        for (int g = 0; g < G; g++) {
          const int h = kvh * G + g;
          // s[t] = q_jh . k_path[t] / sqrt(D);  p = softmax(s);  out_jh = sum_t p[t] v_path[t]
          dot_rows(s.data(), qkv + (size_t)j * QKV + (size_t)h * D, kp.data(), len, D, scale);
          float mx = s[0];
          for (int t = 1; t < len; t++) mx = s[t] > mx ? s[t] : mx;
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int t = 0; t < len; t++) {
            s[t] = fast_exp(s[t] - mx);
            sum += s[t];
          }
          const float inv = 1.0f / sum;
#pragma omp simd
          for (int t = 0; t < len; t++) s[t] *= inv;
          float* o = out + (size_t)j * H * D + (size_t)h * D;
          std::memset(o, 0, sizeof(float) * D);
          axpy_rows(o, s.data(), vp.data(), len, D);
          lse[(size_t)j * H + h] = mx + std::log(sum);
        }
      }
    }
  }
}

void tree_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                             const TreeInfo& tree, int H, int KVH, int D) {
  // p[j,h,i] = exp(q_jh . k_i * scale - lse[j,h]);  dp = dout_jh . v_i;  delta[j,h] = dout_jh . out_jh
  // ds = p * (dp - delta);  dq_jh += scale * ds * k_i;  dk_i += scale * ds * q_jh;  dv_i += p * dout_jh
  // Pass 1 gathers dq over each node's ancestors (parallel over j); pass 2 gathers dk, dv over
  // each node's descendants (parallel over i), which are the contiguous pre-order range
  // [pre[i], end[i]). Each output row is written by one thread only: no atomics, and the result
  // does not depend on the thread count.
  const int N = tree.n, QKV = (H + 2 * KVH) * D, G = H / KVH, L = tree.max_depth + 1, HD = H * D;
  const float scale = 1.0f / std::sqrt((float)D);
  std::vector<float> delta((size_t)N * H);
#pragma omp parallel num_threads(nthreads())
  {
    std::vector<int32_t> path(L);
    std::vector<const float*> kp(L), vp(L);
    std::vector<float> ps(L), dps(L);
#pragma omp for schedule(dynamic, 4)
    for (int j = 0; j < N; j++) {
      const int len = fill_path(path.data(), tree, j);
      for (int h = 0; h < H; h++) {
        const int kvh = h / G;
        if (h % G == 0)
          for (int t = 0; t < len; t++) {
            kp[t] = qkv + (size_t)path[t] * QKV + (size_t)(H + kvh) * D;
            vp[t] = qkv + (size_t)path[t] * QKV + (size_t)(H + KVH + kvh) * D;
          }
        const float* q = qkv + (size_t)j * QKV + (size_t)h * D;
        const float* dy = dout + (size_t)j * HD + (size_t)h * D;
        const float dl = dot(dy, out + (size_t)j * HD + (size_t)h * D, D);
        delta[(size_t)j * H + h] = dl;
        const float l = lse[(size_t)j * H + h];
        dot_rows(ps.data(), q, kp.data(), len, D, scale);
        dot_rows(dps.data(), dy, vp.data(), len, D, 1.0f);
#pragma omp simd
        for (int t = 0; t < len; t++) ps[t] = fast_exp(ps[t] - l) * (dps[t] - dl) * scale;
        axpy_rows(dqkv + (size_t)j * QKV + (size_t)h * D, ps.data(), kp.data(), len, D);
      }
    }
    // (implicit barrier: delta is complete)
    const int B = 64;  // descendants per block
    const float* qp[B];
    const float* dyp[B];
    float sc[B], dp[B];
#pragma omp for schedule(dynamic, 4)
    for (int i = 0; i < N; i++) {
      const float* row_i = qkv + (size_t)i * QKV;
      float* drow_i = dqkv + (size_t)i * QKV;
      const int p0 = tree.pre[i], p1 = tree.end[i];
      for (int h = 0; h < H; h++) {
        const int kvh = h / G;
        const float* k = row_i + (size_t)(H + kvh) * D;
        const float* v = row_i + (size_t)(H + KVH + kvh) * D;
        float* dk = drow_i + (size_t)(H + kvh) * D;
        float* dv = drow_i + (size_t)(H + KVH + kvh) * D;
        for (int b0 = p0; b0 < p1; b0 += B) {
          const int cnt = std::min(B, p1 - b0);
          for (int x = 0; x < cnt; x++) {
            const int j = tree.order[b0 + x];
            qp[x] = qkv + (size_t)j * QKV + (size_t)h * D;
            dyp[x] = dout + (size_t)j * HD + (size_t)h * D;
          }
          dot_rows(sc, k, qp, cnt, D, scale);
          dot_rows(dp, v, dyp, cnt, D, 1.0f);
          for (int x = 0; x < cnt; x++) {
            const int j = tree.order[b0 + x];
            const float pr = fast_exp(sc[x] - lse[(size_t)j * H + h]);
            sc[x] = pr * (dp[x] - delta[(size_t)j * H + h]) * scale;  // ds
            dp[x] = pr;
          }
          axpy_rows(dk, sc, qp, cnt, D);
          axpy_rows(dv, dp, dyp, cnt, D);
        }
      }
    }
  }
}

}  // namespace anvil
