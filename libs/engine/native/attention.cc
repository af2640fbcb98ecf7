// Tree attention. Node j may attend to node i iff i is an ancestor of j or i == j, so the keys
// visible to j are exactly its root-to-j path (depth[j] + 1 nodes). Instead of an N x N mask we
// walk that path: the work is sum over nodes of (depth + 1), which for a wide tree is far less
// than N^2, and for a single chain equals causal attention.
//
// The forward keeps only out[N,H*D] and the log-sum-exp lse[N,H]; the backward recomputes the
// probabilities from lse (as FlashAttention does), so no N x depth matrix is ever stored.
// Grouped-query attention: query head h reads key/value head h / (H / KVH), as transformers'
// repeat_kv does.
#include <omp.h>

#include "common.h"
#include "kernels.h"

namespace anvil {

namespace {

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
    std::vector<float> sc((size_t)G * L);  // scores of the G query heads sharing one kv head
#pragma omp for schedule(dynamic, 4)
    for (int j = 0; j < N; j++) {
      const int len = fill_path(path.data(), tree, j);
      const float* qrow = qkv + (size_t)j * QKV;
      for (int kvh = 0; kvh < KVH; kvh++) {
        // scores: s[g, t] = q_{j, h} . k_{path[t]} * scale  (each key row read once for G heads)
        for (int t = 0; t < len; t++) {
          const float* k = qkv + (size_t)path[t] * QKV + (size_t)(H + kvh) * D;
          for (int g = 0; g < G; g++) sc[(size_t)g * L + t] = dot(qrow + (size_t)(kvh * G + g) * D, k, D) * scale;
        }
        for (int g = 0; g < G; g++) {
          const int h = kvh * G + g;
          float* s = sc.data() + (size_t)g * L;
          float mx = s[0];
          for (int t = 1; t < len; t++) mx = s[t] > mx ? s[t] : mx;
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int t = 0; t < len; t++) {
            s[t] = fast_exp(s[t] - mx);
            sum += s[t];
          }
          float* o = out + (size_t)j * H * D + (size_t)h * D;
          std::memset(o, 0, sizeof(float) * D);
          const float inv = 1.0f / sum;
          for (int t = 0; t < len; t++) {
            const float* v = qkv + (size_t)path[t] * QKV + (size_t)(H + KVH + kvh) * D;
            axpy(o, s[t] * inv, v, D);
          }
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
    std::vector<float> ps(L), dps(L);
#pragma omp for schedule(dynamic, 4)
    for (int j = 0; j < N; j++) {
      const int len = fill_path(path.data(), tree, j);
      for (int h = 0; h < H; h++) {
        const int kvh = h / G;
        const float* q = qkv + (size_t)j * QKV + (size_t)h * D;
        const float* dy = dout + (size_t)j * HD + (size_t)h * D;
        const float dl = dot(dy, out + (size_t)j * HD + (size_t)h * D, D);
        delta[(size_t)j * H + h] = dl;
        const float l = lse[(size_t)j * H + h];
        for (int t = 0; t < len; t++) {
          const float* row = qkv + (size_t)path[t] * QKV;
          ps[t] = dot(q, row + (size_t)(H + kvh) * D, D) * scale - l;
          dps[t] = dot(dy, row + (size_t)(H + KVH + kvh) * D, D);
        }
#pragma omp simd
        for (int t = 0; t < len; t++) ps[t] = fast_exp(ps[t]) * (dps[t] - dl) * scale;
        float* dq = dqkv + (size_t)j * QKV + (size_t)h * D;
        for (int t = 0; t < len; t++) axpy(dq, ps[t], qkv + (size_t)path[t] * QKV + (size_t)(H + kvh) * D, D);
      }
    }
    // (implicit barrier: delta is complete)
#pragma omp for schedule(dynamic, 4)
    for (int i = 0; i < N; i++) {
      const float* row_i = qkv + (size_t)i * QKV;
      float* drow_i = dqkv + (size_t)i * QKV;
      for (int p = tree.pre[i]; p < tree.end[i]; p++) {
        const int j = tree.order[p];
        for (int h = 0; h < H; h++) {
          const int kvh = h / G;
          const float* q = qkv + (size_t)j * QKV + (size_t)h * D;
          const float* dy = dout + (size_t)j * HD + (size_t)h * D;
          const float pr = fast_exp(dot(q, row_i + (size_t)(H + kvh) * D, D) * scale - lse[(size_t)j * H + h]);
          const float dp = dot(dy, row_i + (size_t)(H + KVH + kvh) * D, D);
          const float ds = pr * (dp - delta[(size_t)j * H + h]) * scale;
          axpy(drow_i + (size_t)(H + kvh) * D, ds, q, D);
          axpy(drow_i + (size_t)(H + KVH + kvh) * D, pr, dy, D);
        }
      }
    }
  }
}

}  // namespace anvil
