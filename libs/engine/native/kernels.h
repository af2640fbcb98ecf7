// One forward and one backward function per layer type (llm.c style). Shapes are given in
// comments: N = nodes in the pack, C = hidden size, F = intermediate size, H / KVH = query /
// key-value heads, D = head dim, QKV = (H + 2*KVH) * D, V = vocab, M = nodes with children.
// Backward functions ACCUMULATE (+=) into parameter gradients and, where noted, into input
// gradients; the caller zeroes what must start at zero.
#pragma once

#include <cstdint>

#include "tree.h"

namespace anvil {

// ---- matmul (OpenBLAS cblas_sgemm); weights are stored [out, in] as in PyTorch ----
// out[N,O] = inp[N,I] @ w[O,I]^T (+ out if accumulate)
void matmul_forward(float* out, const float* inp, const float* w, int N, int I, int O, bool accumulate);
// dinp[N,I] (+)= dout[N,O] @ w[O,I];  dw[O,I] += dout^T @ inp.  dinp and dw may be null (dw: a frozen weight).
void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int I, int O,
                     bool accumulate_dinp);
// out[N,O] = bias[O] broadcast (so that a following accumulate-matmul adds x @ W^T)
void bias_fill(float* out, const float* bias, int N, int O);
// dbias[O] += sum_n dout[N,O]
void bias_backward(float* dbias, const float* dout, int N, int O);

// ---- embedding ----
// out[N,C] = wte[tokens[n], :]
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C);
// dwte[tokens[n], :] += dout[n, :]
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C);

// ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * w ----
// out[N,C], rstd[N], inp[N,C], w[C]
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps);
// dinp[N,C] += ..., dw[C] += ... (dw may be null: frozen), given dout[N,C]
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd, int N,
                      int C);

// ---- RoPE (Hugging Face rotate-half convention), in place on q and k inside qkv[N,QKV] ----
// cos/sin tables are [max_depth+1, D/2]; the position of node n is depth[n].
void rope_forward(float* qkv, const int32_t* depth, const float* cos_t, const float* sin_t, int N, int H, int KVH, int D);
// inverse rotation applied in place to dq and dk inside dqkv[N,QKV]
void rope_backward(float* dqkv, const int32_t* depth, const float* cos_t, const float* sin_t, int N, int H, int KVH, int D);

// ---- tree attention: node j attends to its ancestors and itself (path of length depth+1) ----
// out[N,H*D], lse[N,H] (log-sum-exp of the scaled scores, kept for the backward), qkv[N,QKV]
void tree_attention_forward(float* out, float* lse, const float* qkv, const TreeInfo& tree, int H, int KVH, int D);
// dqkv[N,QKV] must be zero on entry; dout[N,H*D]; recomputes scores from lse (no N x depth matrix is stored)
void tree_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                             const TreeInfo& tree, int H, int KVH, int D);

// ---- SwiGLU: h = silu(gate) * up, with gu[N,2F] = [gate | up] from one fused GEMM ----
void swiglu_forward(float* h, const float* gu, int N, int F);
// dgu[N,2F] = d/d[gate|up] given dh[N,F]
void swiglu_backward(float* dgu, const float* dh, const float* gu, int N, int F);

// ---- LM head + log-softmax over the tree: logits only for the M nodes that have children ----
// Each child c of internal node p gets logp[c] = log softmax(W @ h[p])[tokens[c]] and
// entropy[c] = entropy of that distribution. Logits are computed in row chunks and not kept:
// lse[M] and ent[M] are stored and the backward recomputes each chunk.
struct LogprobScratch {
  float* rows;    // [R, C] gathered hidden rows of a chunk
  float* logits;  // [R, V]
  int R;          // chunk rows
};
// kept [M, V] (or null): when given, the logits are written there instead of the scratch chunk.
void logprob_forward(float* logp, float* entropy, float* lse, float* ent, const float* h, const float* w,
                     const int32_t* tokens, const TreeInfo& tree, int C, int V, LogprobScratch s, float* kept);
// dh[N,C] += ..., dw[V,C] += ... (dw may be null: frozen), given per-node dlogp[N] and optional dentropy[N] (may be null)
void logprob_backward(float* dh, float* dw, const float* dlogp, const float* dentropy, const float* h, const float* w,
                      const float* lse, const float* ent, const int32_t* tokens, const TreeInfo& tree, int C, int V,
                      LogprobScratch s, const float* kept);

// ---- AdamW with decoupled weight decay (PyTorch semantics) over one contiguous range ----
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t);

// ---- gradient utilities ----
double sum_squares(const float* x, size_t n);
void scale_inplace(float* x, size_t n, float s);

}  // namespace anvil
