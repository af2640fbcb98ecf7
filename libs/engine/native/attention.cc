// Tree attention. Node j may attend to node i iff i is an ancestor of j or i == j; with DFS
// pre-order index pre[] and subtree end end[]: pre[i] <= pre[j] < end[i]. The keys visible to j
// are exactly its root-to-j path, so the work is proportional to sum over nodes of (depth + 1),
// not N^2: a wide tree is cheap, and a single chain is ordinary causal attention.
//
// Tiling. Queries are taken in blocks of BQ consecutive pre-order nodes. Such nodes share almost
// all of their ancestors, so the block's key set is the UNION of their ancestor paths (|U| is
// about max depth + BQ, not BQ times it), gathered once into contiguous [|U|, D] tiles and used
// by every query of the block and every query head of a kv group; the interval test above masks
// the few (query, key) pairs of the tile that are not ancestor pairs. The backward's dK/dV pass
// is the mirror image: keys in blocks of BK consecutive pre-order nodes, whose descendants are
// the contiguous pre-order range [pre[first], max end). Each output row is written by exactly one
// block, so there are no atomics and results do not depend on the thread count.
//
// The forward keeps only out[N,H*D] and the log-sum-exp lse[N,H]; the backward recomputes the
// probabilities from lse (as FlashAttention does), so no N x depth matrix is ever stored.
// Grouped-query attention: query head h reads key/value head h / (H / KVH) (transformers'
// repeat_kv). The two tile kernels (scores = A B^T, accumulate = W X) have AVX2 register-blocked
// versions when D is a multiple of 8; the plain loops are the reference and the fallback.
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

constexpr int BQ = 16;  // queries per block (forward, dQ pass)
constexpr int BK = 16;  // keys per block (dK/dV pass)
constexpr int CH = 64;  // queries per chunk inside a key block's descendant range

#ifdef ANVIL_AVX2
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// S[a, b] = scale * A[a] . B[b];  A [na, D], B [nb, D] contiguous rows, S [na, nb]
void tile_scores(float* S, const float* A, int na, const float* B, int nb, int D, float scale) {
  int a = 0;
#ifdef ANVIL_AVX2
  if ((D & 7) == 0) {
    for (; a + 2 <= na; a += 2) {  // 2 x 4 register tile: 8 accumulators, 6 loads per 8 FMAs
      const float *a0 = A + (size_t)a * D, *a1 = a0 + D;
      int b = 0;
      for (; b + 4 <= nb; b += 4) {
        const float *b0 = B + (size_t)b * D, *b1 = b0 + D, *b2 = b1 + D, *b3 = b2 + D;
        __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00;
        for (int d = 0; d < D; d += 8) {
          const __m256 x0 = _mm256_loadu_ps(a0 + d), x1 = _mm256_loadu_ps(a1 + d);
          __m256 y = _mm256_loadu_ps(b0 + d);
          s00 = _mm256_fmadd_ps(x0, y, s00);
          s10 = _mm256_fmadd_ps(x1, y, s10);
          y = _mm256_loadu_ps(b1 + d);
          s01 = _mm256_fmadd_ps(x0, y, s01);
          s11 = _mm256_fmadd_ps(x1, y, s11);
          y = _mm256_loadu_ps(b2 + d);
          s02 = _mm256_fmadd_ps(x0, y, s02);
          s12 = _mm256_fmadd_ps(x1, y, s12);
          y = _mm256_loadu_ps(b3 + d);
          s03 = _mm256_fmadd_ps(x0, y, s03);
          s13 = _mm256_fmadd_ps(x1, y, s13);
        }
        float* r0 = S + (size_t)a * nb + b;
        float* r1 = r0 + nb;
        r0[0] = hsum8(s00) * scale; r0[1] = hsum8(s01) * scale; r0[2] = hsum8(s02) * scale; r0[3] = hsum8(s03) * scale;
        r1[0] = hsum8(s10) * scale; r1[1] = hsum8(s11) * scale; r1[2] = hsum8(s12) * scale; r1[3] = hsum8(s13) * scale;
      }
      for (; b < nb; b++) {
        S[(size_t)a * nb + b] = dot(a0, B + (size_t)b * D, D) * scale;
        S[(size_t)(a + 1) * nb + b] = dot(a1, B + (size_t)b * D, D) * scale;
      }
    }
  }
#endif
  for (; a < na; a++)
    for (int b = 0; b < nb; b++) S[(size_t)a * nb + b] = dot(A + (size_t)a * D, B + (size_t)b * D, D) * scale;
}

// O[a] += sum_b W[a, b] * X[b];  O [na, D], W [na, nb], X [nb, D] contiguous rows
void tile_accumulate(float* O, const float* W, int na, int nb, const float* X, int D) {
  int a = 0;
#ifdef ANVIL_AVX2
  if ((D & 7) == 0) {
    for (; a + 2 <= na; a += 2) {
      const float *w0 = W + (size_t)a * nb, *w1 = w0 + nb;
      float *o0 = O + (size_t)a * D, *o1 = o0 + D;
      int d0 = 0;
      for (; d0 + 32 <= D; d0 += 32) {  // 2 rows x 32 columns of O live in 8 registers
        __m256 p0 = _mm256_loadu_ps(o0 + d0), p1 = _mm256_loadu_ps(o0 + d0 + 8), p2 = _mm256_loadu_ps(o0 + d0 + 16),
               p3 = _mm256_loadu_ps(o0 + d0 + 24);
        __m256 q0 = _mm256_loadu_ps(o1 + d0), q1 = _mm256_loadu_ps(o1 + d0 + 8), q2 = _mm256_loadu_ps(o1 + d0 + 16),
               q3 = _mm256_loadu_ps(o1 + d0 + 24);
        for (int b = 0; b < nb; b++) {
          const __m256 u = _mm256_set1_ps(w0[b]), v = _mm256_set1_ps(w1[b]);
          const float* x = X + (size_t)b * D + d0;
          __m256 y = _mm256_loadu_ps(x);
          p0 = _mm256_fmadd_ps(u, y, p0);
          q0 = _mm256_fmadd_ps(v, y, q0);
          y = _mm256_loadu_ps(x + 8);
          p1 = _mm256_fmadd_ps(u, y, p1);
          q1 = _mm256_fmadd_ps(v, y, q1);
          y = _mm256_loadu_ps(x + 16);
          p2 = _mm256_fmadd_ps(u, y, p2);
          q2 = _mm256_fmadd_ps(v, y, q2);
          y = _mm256_loadu_ps(x + 24);
          p3 = _mm256_fmadd_ps(u, y, p3);
          q3 = _mm256_fmadd_ps(v, y, q3);
        }
        _mm256_storeu_ps(o0 + d0, p0); _mm256_storeu_ps(o0 + d0 + 8, p1); _mm256_storeu_ps(o0 + d0 + 16, p2); _mm256_storeu_ps(o0 + d0 + 24, p3);
        _mm256_storeu_ps(o1 + d0, q0); _mm256_storeu_ps(o1 + d0 + 8, q1); _mm256_storeu_ps(o1 + d0 + 16, q2); _mm256_storeu_ps(o1 + d0 + 24, q3);
      }
      for (; d0 < D; d0 += 8) {
        __m256 p = _mm256_loadu_ps(o0 + d0), q = _mm256_loadu_ps(o1 + d0);
        for (int b = 0; b < nb; b++) {
          const __m256 y = _mm256_loadu_ps(X + (size_t)b * D + d0);
          p = _mm256_fmadd_ps(_mm256_set1_ps(w0[b]), y, p);
          q = _mm256_fmadd_ps(_mm256_set1_ps(w1[b]), y, q);
        }
        _mm256_storeu_ps(o0 + d0, p);
        _mm256_storeu_ps(o1 + d0, q);
      }
    }
  }
#endif
  for (; a < na; a++)
    for (int b = 0; b < nb; b++) axpy(O + (size_t)a * D, W[(size_t)a * nb + b], X + (size_t)b * D, D);
}

// Head-major copy of a head's rows: dst[hh][n] = src[n * stride + hh * D]  ([heads][N][D])
void to_head_major(float* dst, const float* src, int N, int heads, size_t stride, int D) {
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++)
    for (int hh = 0; hh < heads; hh++)
      std::memcpy(dst + ((size_t)hh * N + n) * D, src + (size_t)n * stride + (size_t)hh * D, sizeof(float) * D);
}

// Rows idx[0..n) of a head-major [N][D] matrix: a pointer into it when the indices are
// consecutive, else a gather into buf.
inline const float* rows_of(const float* hm, const int32_t* idx, int n, int D, std::vector<float>& buf) {
  bool contiguous = true;
  for (int r = 1; r < n && contiguous; r++) contiguous = idx[r] == idx[0] + r;
  if (contiguous) return hm + (size_t)idx[0] * D;
  if (buf.size() < (size_t)n * D) buf.resize((size_t)n * D);
  for (int r = 0; r < n; r++) std::memcpy(buf.data() + (size_t)r * D, hm + (size_t)idx[r] * D, sizeof(float) * D);
  return buf.data();
}

// Per-thread scratch, grown on demand (no allocation per query).
struct Scratch {
  std::vector<float> k, v, q, dq, s, dp;
  std::vector<int32_t> u, upre, uend, mark;
  int stamp = 0;
  void fit(std::vector<float>& x, size_t n) {
    if (x.size() < n) x.resize(n);
  }
};

// The union of the ancestor paths (each node included) of the block's nodes, into s.u.
void ancestor_union(Scratch& s, const TreeInfo& tree, const int32_t* nodes, int n) {
  if (s.mark.size() < (size_t)tree.n) s.mark.assign(tree.n, 0);
  s.stamp++;
  s.u.clear();
  for (int x = 0; x < n; x++)
    for (int a = nodes[x]; a >= 0 && s.mark[a] != s.stamp; a = tree.parent[a]) {
      s.mark[a] = s.stamp;
      s.u.push_back(a);
    }
  // sorted by node index: for packs in pre-order (what the packer emits) a chain's ancestors are
  // then one contiguous run of rows, read in place without a gather
  std::sort(s.u.begin(), s.u.end());
  s.upre.resize(s.u.size());
  s.uend.resize(s.u.size());
  for (size_t i = 0; i < s.u.size(); i++) {
    s.upre[i] = tree.pre[s.u[i]];
    s.uend[i] = tree.end[s.u[i]];
  }
}

}  // namespace

void tree_attention_forward(float* out, float* lse, const float* qkv, const TreeInfo& tree, int H, int KVH, int D) {
  const int N = tree.n, QKV = (H + 2 * KVH) * D, G = H / KVH, HD = H * D;
  const float scale = 1.0f / std::sqrt((float)D);
  const int nblocks = (N + BQ - 1) / BQ;
  // keys, values and queries head-major ([head][N][D]) so that tiles are contiguous rows
  std::vector<float> kh((size_t)KVH * N * D), vh((size_t)KVH * N * D), qh((size_t)H * N * D);
  to_head_major(qh.data(), qkv, N, H, QKV, D);
  to_head_major(kh.data(), qkv + (size_t)H * D, N, KVH, QKV, D);
  to_head_major(vh.data(), qkv + (size_t)(H + KVH) * D, N, KVH, QKV, D);
#pragma omp parallel num_threads(nthreads())
  {
    Scratch s;
#pragma omp for schedule(dynamic, 1)
    for (int blk = 0; blk < nblocks; blk++) {
      const int p0 = blk * BQ, nq = std::min(BQ, N - p0);
      const int32_t* qs = tree.order.data() + p0;  // query nodes, consecutive in pre-order
      ancestor_union(s, tree, qs, nq);
      const int nu = (int)s.u.size();
      s.fit(s.dq, (size_t)BQ * D);
      s.fit(s.s, (size_t)BQ * nu);
      for (int kvh = 0; kvh < KVH; kvh++) {
        const float* K = rows_of(kh.data() + (size_t)kvh * N * D, s.u.data(), nu, D, s.k);  // K_U [nu, D]
        const float* V = rows_of(vh.data() + (size_t)kvh * N * D, s.u.data(), nu, D, s.v);  // V_U [nu, D]
        for (int g = 0; g < G; g++) {
          const int h = kvh * G + g;
          const float* Q = rows_of(qh.data() + (size_t)h * N * D, qs, nq, D, s.q);  // Q_blk [nq, D]
          tile_scores(s.s.data(), Q, nq, K, nu, D, scale);                         // S [nq, nu]
          const int32_t* upre = s.upre.data();
          const int32_t* uend = s.uend.data();
          for (int x = 0; x < nq; x++) {
            float* row = s.s.data() + (size_t)x * nu;
            const int pj = p0 + x;  // pre-order index of the query; key u is visible iff upre <= pj < uend
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int u = 0; u < nu; u++) {
              const float val = (upre[u] <= pj && pj < uend[u]) ? row[u] : -INFINITY;
              mx = val > mx ? val : mx;
            }
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int u = 0; u < nu; u++) {
              const float e = fast_exp(row[u] - mx);
              row[u] = (upre[u] <= pj && pj < uend[u]) ? e : 0.f;
              sum += row[u];
            }
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int u = 0; u < nu; u++) row[u] *= inv;
            lse[(size_t)qs[x] * H + h] = mx + std::log(sum);
          }
          std::memset(s.dq.data(), 0, sizeof(float) * nq * D);
          tile_accumulate(s.dq.data(), s.s.data(), nq, nu, V, D);  // O_blk = P V_U
          for (int x = 0; x < nq; x++)
            std::memcpy(out + (size_t)qs[x] * HD + (size_t)h * D, s.dq.data() + (size_t)x * D, sizeof(float) * D);
        }
      }
    }
  }
}

void tree_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                             const TreeInfo& tree, int H, int KVH, int D) {
  // P[j,i] = exp(q_j . k_i * scale - lse_j) on ancestor pairs;  dP[j,i] = dout_j . v_i;
  // delta_j = dout_j . out_j;  dS = P * (dP - delta) * scale
  // dq_j += sum_i dS[j,i] k_i  (query blocks);  dk_i += sum_j dS[j,i] q_j, dv_i += sum_j P[j,i] dout_j  (key blocks)
  const int N = tree.n, QKV = (H + 2 * KVH) * D, G = H / KVH, HD = H * D;
  const float scale = 1.0f / std::sqrt((float)D);
  std::vector<float> delta((size_t)N * H);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int j = 0; j < N; j++)
    for (int h = 0; h < H; h++)
      delta[(size_t)j * H + h] = dot(dout + (size_t)j * HD + (size_t)h * D, out + (size_t)j * HD + (size_t)h * D, D);
  std::vector<float> kh((size_t)KVH * N * D), vh((size_t)KVH * N * D), qh((size_t)H * N * D), dyh((size_t)H * N * D);
  to_head_major(qh.data(), qkv, N, H, QKV, D);
  to_head_major(kh.data(), qkv + (size_t)H * D, N, KVH, QKV, D);
  to_head_major(vh.data(), qkv + (size_t)(H + KVH) * D, N, KVH, QKV, D);
  to_head_major(dyh.data(), dout, N, H, HD, D);

  const int nqb = (N + BQ - 1) / BQ, nkb = (N + BK - 1) / BK;
#pragma omp parallel num_threads(nthreads())
  {
    Scratch s;
    std::vector<float> dybuf;
    // ---- pass 1: dQ over query blocks and the union of their ancestors ----
#pragma omp for schedule(dynamic, 1)
    for (int blk = 0; blk < nqb; blk++) {
      const int p0 = blk * BQ, nq = std::min(BQ, N - p0);
      const int32_t* qs = tree.order.data() + p0;
      ancestor_union(s, tree, qs, nq);
      const int nu = (int)s.u.size();
      s.fit(s.dq, (size_t)BQ * D);
      s.fit(s.s, (size_t)BQ * nu);
      s.fit(s.dp, (size_t)BQ * nu);
      const int32_t* upre = s.upre.data();
      const int32_t* uend = s.uend.data();
      for (int kvh = 0; kvh < KVH; kvh++) {
        const float* K = rows_of(kh.data() + (size_t)kvh * N * D, s.u.data(), nu, D, s.k);
        const float* V = rows_of(vh.data() + (size_t)kvh * N * D, s.u.data(), nu, D, s.v);
        for (int g = 0; g < G; g++) {
          const int h = kvh * G + g;
          const float* Q = rows_of(qh.data() + (size_t)h * N * D, qs, nq, D, s.q);
          const float* DY = rows_of(dyh.data() + (size_t)h * N * D, qs, nq, D, dybuf);
          tile_scores(s.s.data(), Q, nq, K, nu, D, scale);  // S
          tile_scores(s.dp.data(), DY, nq, V, nu, D, 1.0f);  // dP
          for (int x = 0; x < nq; x++) {
            float* row = s.s.data() + (size_t)x * nu;
            const float* dpr = s.dp.data() + (size_t)x * nu;
            const int pj = p0 + x;
            const float l = lse[(size_t)qs[x] * H + h], dl = delta[(size_t)qs[x] * H + h];
#pragma omp simd
            for (int u = 0; u < nu; u++) {
              const float v = fast_exp(row[u] - l) * (dpr[u] - dl) * scale;
              row[u] = (upre[u] <= pj && pj < uend[u]) ? v : 0.f;
            }
          }
          std::memset(s.dq.data(), 0, sizeof(float) * nq * D);
          tile_accumulate(s.dq.data(), s.s.data(), nq, nu, K, D);  // dQ_blk = dS K_U
          for (int x = 0; x < nq; x++) axpy(dqkv + (size_t)qs[x] * QKV + (size_t)h * D, 1.0f, s.dq.data() + (size_t)x * D, D);
        }
      }
    }
    // ---- pass 2: dK, dV over key blocks and their contiguous pre-order range of descendants ----
    std::vector<float> kbuf, vbuf, dkb((size_t)BK * D), dvb((size_t)BK * D);
    std::vector<float> qcbuf, dycbuf, st((size_t)BK * CH), dpt((size_t)BK * CH), lsec(CH), dlc(CH);
#pragma omp for schedule(dynamic, 1)
    for (int blk = 0; blk < nkb; blk++) {
      const int p0 = blk * BK, nk = std::min(BK, N - p0);
      const int32_t* ks = tree.order.data() + p0;  // key nodes, consecutive in pre-order
      int pend = p0 + nk;
      int32_t kend[BK];
      for (int x = 0; x < nk; x++) {
        kend[x] = tree.end[ks[x]];
        pend = std::max(pend, (int)kend[x]);
      }
      for (int kvh = 0; kvh < KVH; kvh++) {
        const float* Kb = rows_of(kh.data() + (size_t)kvh * N * D, ks, nk, D, kbuf);
        const float* Vb = rows_of(vh.data() + (size_t)kvh * N * D, ks, nk, D, vbuf);
        std::memset(dkb.data(), 0, sizeof(float) * nk * D);
        std::memset(dvb.data(), 0, sizeof(float) * nk * D);
        for (int g = 0; g < G; g++) {
          const int h = kvh * G + g;
          for (int c0 = p0; c0 < pend; c0 += CH) {  // descendants (queries) in chunks of pre-order positions
            const int nc = std::min(CH, pend - c0);
            const int32_t* js = tree.order.data() + c0;
            const float* Qc = rows_of(qh.data() + (size_t)h * N * D, js, nc, D, qcbuf);
            const float* DYc = rows_of(dyh.data() + (size_t)h * N * D, js, nc, D, dycbuf);
            for (int c = 0; c < nc; c++) {
              lsec[c] = lse[(size_t)js[c] * H + h];
              dlc[c] = delta[(size_t)js[c] * H + h];
            }
            tile_scores(st.data(), Kb, nk, Qc, nc, D, scale);   // S^T [nk, nc]
            tile_scores(dpt.data(), Vb, nk, DYc, nc, D, 1.0f);  // dP^T
            for (int x = 0; x < nk; x++) {
              const int pi = p0 + x, ei = kend[x];
              float* srow = st.data() + (size_t)x * nc;
              float* prow = dpt.data() + (size_t)x * nc;
#pragma omp simd
              for (int c = 0; c < nc; c++) {
                const int pj = c0 + c;
                const bool ok = pi <= pj && pj < ei;
                const float p = fast_exp(srow[c] - lsec[c]);
                srow[c] = ok ? p * (prow[c] - dlc[c]) * scale : 0.f;  // dS^T
                prow[c] = ok ? p : 0.f;                               // P^T
              }
            }
            tile_accumulate(dkb.data(), st.data(), nk, nc, Qc, D);    // dK_blk += dS^T Q
            tile_accumulate(dvb.data(), dpt.data(), nk, nc, DYc, D);  // dV_blk += P^T dO
          }
        }
        for (int x = 0; x < nk; x++) {
          axpy(dqkv + (size_t)ks[x] * QKV + (size_t)(H + kvh) * D, 1.0f, dkb.data() + (size_t)x * D, D);
          axpy(dqkv + (size_t)ks[x] * QKV + (size_t)(H + KVH + kvh) * D, 1.0f, dvb.data() + (size_t)x * D, D);
        }
      }
    }
  }
}

}  // namespace anvil
