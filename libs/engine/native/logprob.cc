// LM head + log-softmax over a packed tree. A node's token is predicted from its PARENT's final
// hidden state, so logits are computed once per node that has children (M rows, not N) and each
// child gathers its own target. Logits [M, V] would dominate memory for a large vocab, so they
// are produced in chunks of R rows and discarded; lse and entropy per row are kept and the
// backward recomputes each chunk's logits (one extra GEMM of the LM head's size).
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "common.h"
#include "kernels.h"

namespace anvil {

namespace {

void gather_rows(float* dst, const float* h, const int32_t* idx, int R, int C) {
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int r = 0; r < R; r++) std::memcpy(dst + (size_t)r * C, h + (size_t)idx[r] * C, sizeof(float) * C);
}

}  // namespace

void logprob_forward(float* logp, float* entropy, float* lse, float* ent, const float* h, const float* w,
                     const int32_t* tokens, const TreeInfo& tree, int C, int V, LogprobScratch s, float* kept) {
  // logp[N], entropy[N] (0 for roots), lse[M], ent[M]; h[N,C] final normed hidden; w[V,C]
  const int N = tree.n, M = (int)tree.internal.size();
  std::memset(logp, 0, sizeof(float) * N);
  std::memset(entropy, 0, sizeof(float) * N);
  for (int r0 = 0; r0 < M; r0 += s.R) {
    const int R = std::min(s.R, M - r0);
    float* chunk = kept ? kept + (size_t)r0 * V : s.logits;
    gather_rows(s.rows, h, tree.internal.data() + r0, R, C);
    matmul_forward(chunk, s.rows, w, R, C, V, false);  // logits[R,V]
#pragma omp parallel for num_threads(nthreads()) schedule(static)
    for (int r = 0; r < R; r++) {
      const float* l = chunk + (size_t)r * V;
      float mx = l[0];
      for (int k = 1; k < V; k++) mx = l[k] > mx ? l[k] : mx;
      float sum = 0.f, swl = 0.f;  // sum e^(l-mx), sum e^(l-mx) * (l-mx)
#pragma omp simd reduction(+ : sum, swl)
      for (int k = 0; k < V; k++) {
        float z = l[k] - mx, e = fast_exp(z);
        sum += e;
        swl += e * z;
      }
      const float logsum = std::log(sum);
      const float L = mx + logsum;
      const float H = logsum - swl / sum;  // entropy = -sum p log p = log S - E_p[l - mx]
      lse[r0 + r] = L;
      ent[r0 + r] = H;
      const int node = tree.internal[r0 + r];
      for (int c = tree.child_start[node]; c < tree.child_start[node + 1]; c++) {
        const int ch = tree.children[c];
        logp[ch] = l[tokens[ch]] - L;
        entropy[ch] = H;
      }
    }
  }
}

void logprob_backward(float* dh, float* dw, const float* dlogp, const float* dentropy, const float* h, const float* w,
                      const float* lse, const float* ent, const int32_t* tokens, const TreeInfo& tree, int C, int V,
                      LogprobScratch s, const float* kept) {
  // For an internal row with distribution P (log P = lp) and children c with coefficients a_c, e_c:
  //   dlogp_c / dlogit_k = 1[k = tok_c] - P_k;   dH / dlogit_k = -P_k (lp_k + H)
  //   g_k = -P_k (A + E (lp_k + H)) + sum_c a_c 1[k = tok_c],  A = sum_c a_c, E = sum_c e_c
  // Rows whose children all have zero coefficients (prompt tokens in RL) contribute nothing and
  // are skipped entirely, which saves the LM-head GEMMs for long prompts.
  const int M = (int)tree.internal.size();
  std::vector<int32_t> active;  // internal row indices with a nonzero coefficient
  std::vector<float> A(M, 0.f), E(M, 0.f);
  for (int r = 0; r < M; r++) {
    const int node = tree.internal[r];
    bool any = false;
    for (int c = tree.child_start[node]; c < tree.child_start[node + 1]; c++) {
      const int ch = tree.children[c];
      A[r] += dlogp[ch];
      if (dentropy) E[r] += dentropy[ch];
      any = any || dlogp[ch] != 0.f || (dentropy && dentropy[ch] != 0.f);
    }
    if (any) active.push_back(r);
  }
  const int MA = (int)active.size();
  std::vector<int32_t> nodes(MA);
  for (int a = 0; a < MA; a++) nodes[a] = tree.internal[active[a]];
  for (int a0 = 0; a0 < MA; a0 += s.R) {
    const int R = std::min(s.R, MA - a0);
    gather_rows(s.rows, h, nodes.data() + a0, R, C);
    if (!kept) matmul_forward(s.logits, s.rows, w, R, C, V, false);  // recompute logits[R,V]
#pragma omp parallel for num_threads(nthreads()) schedule(static)
    for (int r = 0; r < R; r++) {
      const int row = active[a0 + r];
      float* g = s.logits + (size_t)r * V;
      // kept logits are read in place (they stay intact for another backward), recomputed ones overwritten
      const float* l = kept ? kept + (size_t)row * V : g;
      const float L = lse[row], H = ent[row], Ar = A[row], Er = E[row];
#pragma omp simd
      for (int k = 0; k < V; k++) {
        float lp = l[k] - L, P = fast_exp(lp);
        g[k] = -P * (Ar + Er * (lp + H));
      }
      const int node = tree.internal[row];
      for (int c = tree.child_start[node]; c < tree.child_start[node + 1]; c++) {
        const int ch = tree.children[c];
        g[tokens[ch]] += dlogp[ch];
      }
    }
    // dw[V,C] += g^T @ rows, then rows <- g @ w (the gradient of the gathered hidden rows)
    if (dw) matmul_backward(nullptr, dw, s.logits, s.rows, w, R, C, V, false);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, C, V, 1.0f, s.logits, V, w, C, 0.0f, s.rows, C);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
    for (int r = 0; r < R; r++) axpy(dh + (size_t)nodes[a0 + r] * C, 1.0f, s.rows + (size_t)r * C, C);
  }
}

}  // namespace anvil
