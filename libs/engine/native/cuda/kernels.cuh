// CUDA kernels of the GPU training path, one forward and one backward per layer type (llm.c
// style), the CPU kernels in ../kernels.h being the reference each one is checked against
// (checks.cu). All pointers are device pointers; every function only enqueues work on `s`.
//
// Dtypes (issue "CUDA backend"): the residual stream, its gradient, norms' rstd, attention lse,
// master weights, gradients and AdamW moments are fp32; GEMM operands of the decoder layers are
// bf16 (ln outputs, qkv, attention output, gate|up, h and their gradients); the final norm output,
// the LM head and the log-softmax are fp32 (the LM-head GEMM runs in TF32 on fp32 operands).
//
// Node order: the GPU model works on nodes in DFS pre-order of the packed tree (the host permutes
// tokens in and log-probs out). In pre-order, node i is an ancestor-or-self of node j iff
// i <= j < end[i], where end[i] is the pre-order end of i's subtree; a node's position id is its
// depth. Shapes: N nodes, C hidden, F intermediate, H / KVH query / kv heads, D head dim,
// QKV = (H + 2*KVH) * D, V vocab, M = nodes with children (the LM-head rows).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil {
namespace cuda {

using bf16 = __nv_bfloat16;

// ---- conversions and row moves ----
// out[n] = bf16(in[n])
void f32_to_bf16(bf16* out, const float* in, size_t n, cudaStream_t s);
// out[r, :] = in[idx[r], :]   (out[R,C], in[*,C])
void gather_rows(float* out, const float* in, const int32_t* idx, int R, int C, cudaStream_t s);
// out[idx[r], :] = in[r, :]   (rows idx are distinct)
void scatter_rows(float* out, const float* in, const int32_t* idx, int R, int C, cudaStream_t s);

// ---- embedding (fp32 table, fp32 residual) ----
// out[N,C] = wte[tokens[n], :]
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C, cudaStream_t s);
// dwte[V,C] += dout[n, :] at row tokens[n] (atomics: tokens repeat)
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C, cudaStream_t s);

// ---- RMSNorm: out = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps) ----
// out[N,C] (bf16 for the layer norms, fp32 for the final norm), rstd[N], inp[N,C] fp32, w[C] fp32
void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* w, int N, int C, float eps, cudaStream_t s);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps, cudaStream_t s);
// dinp[N,C] += d/dinp, dw[C] += d/dw (dw may be null: a frozen weight), given dout[N,C] fp32 and
// the forward's inp and rstd
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int N, int C, cudaStream_t s);

// ---- bias + RoPE (Hugging Face rotate-half), in place on qkv[N,QKV] bf16 ----
// bias[QKV] fp32 or null is added to q, k and v first; then q and k heads are rotated at position
// depth[n] with cos_t/sin_t [P, D/2] fp32 (P > max depth).
void rope_forward(bf16* qkv, const float* bias, const int32_t* depth, const float* cos_t, const float* sin_t, int N,
                  int H, int KVH, int D, cudaStream_t s);
// dqkv_out[N,QKV] bf16 = dqkv[N,QKV] fp32 with the inverse rotation applied to the q and k parts;
// dbias[QKV] += column sums of dqkv_out's fp32 values when dbias is not null.
void rope_backward(bf16* dqkv_out, float* dbias, const float* dqkv, const int32_t* depth, const float* cos_t,
                   const float* sin_t, int N, int H, int KVH, int D, cudaStream_t s);

// ---- SwiGLU: h = silu(gate) * up, gu[N,2F] = [gate | up] per row ----
void swiglu_forward(bf16* h, const bf16* gu, int N, int F, cudaStream_t s);
// dgu[N,2F] bf16 from dh[N,F] fp32
void swiglu_backward(bf16* dgu, const float* dh, const bf16* gu, int N, int F, cudaStream_t s);

// ---- LM head log-softmax over a chunk of rows [r0, r0+R) of the M internal nodes ----
// logits[R,V] fp32 holds the chunk. internal[M] = node of each row; child_start[N+1]/children
// = CSR of children (pre-order ids). Writes lse[r0+r], ent[r0+r] and, for every child c of
// each row's node, logp[c] = logits[r, tokens[c]] - lse and entropy[c] = ent. Roots keep the
// zeros the caller put in logp/entropy.
void logprob_forward(float* logp, float* entropy, float* lse, float* ent, const float* logits, const int32_t* tokens,
                     const int32_t* internal, const int32_t* child_start, const int32_t* children, int r0, int R,
                     int V, cudaStream_t s);
// dlogits[R,V] (may alias logits: in place) = d L / d logits for the chunk, given per-node
// dlogp[N] and dentropy[N] (null = no entropy term):
//   dz_v = sum_c dlogp[c] * (1[v == tok_c] - p_v) - sum_c dent[c] * p_v * (log p_v + H)
void logprob_backward(float* dlogits, const float* logits, const float* lse, const float* ent, const float* dlogp,
                      const float* dentropy, const int32_t* tokens, const int32_t* internal,
                      const int32_t* child_start, const int32_t* children, int r0, int R, int V, cudaStream_t s);

// ---- tree attention (flash-style tiles over the ancestor-interval mask; attention.cu) ----
// Scratch the attention kernels need for N nodes and H query heads (per-tile mask summaries, the
// backward's rowsum(dO * O) per node and head, ...); the caller passes a 256-byte aligned buffer.
size_t tree_attention_workspace_bytes(int N, int H);
// out[N,H*D] bf16, lse[N,H] fp32 (natural-log log-sum-exp of the scaled scores), qkv[N,QKV] bf16
// (q and k already rotated), end[N] pre-order subtree ends. Scale 1/sqrt(D). GQA: query head h
// reads kv head h / (H / KVH).
void tree_attention_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* end, int N, int H, int KVH, int D,
                            void* workspace, cudaStream_t s);
// dqkv[N,QKV] fp32 must be zero on entry (accumulated, atomics allowed); dout[N,H*D] bf16;
// out and lse from the forward.
void tree_attention_backward(float* dqkv, const bf16* dout, const bf16* out, const float* lse, const bf16* qkv,
                             const int32_t* end, int N, int H, int KVH, int D, void* workspace, cudaStream_t s);

// ---- LoRA dropout (lora.cu): the CPU's counter-based mask (../lora_mask.h), so both backends drop
// the same elements. Row p of the [N, I] input is node node[p] of the caller's pack (the device
// works in pre-order); element i of it is kept iff lora_dropout_bits(seed, node[p] * I + i) >= thr,
// and kept values are multiplied by keep_scale = 1 / (1 - p).
// out[N,I] bf16 = dropout(x[N,I] bf16)
void lora_dropout_forward(bf16* out, const bf16* x, const int32_t* node, int N, int I, uint32_t thr, float keep_scale,
                          uint64_t seed, cudaStream_t s);
// dx[N,I] += dropout(dxd[N,I] fp32) with the same mask; dx fp32 or bf16
void lora_dropout_backward(float* dx, const float* dxd, const int32_t* node, int N, int I, uint32_t thr, float keep_scale,
                           uint64_t seed, cudaStream_t s);
void lora_dropout_backward(bf16* dx, const float* dxd, const int32_t* node, int N, int I, uint32_t thr, float keep_scale,
                           uint64_t seed, cudaStream_t s);

// ---- AdamW (PyTorch semantics, decoupled decay), fp32 master + optional bf16 copy ----
// p = p * (1 - lr * wd) - lr * mhat / (sqrt(vhat) + eps), exactly as ../adamw.cc; t is the 1-based
// step; p16 (may be null) = bf16(p) afterwards. grad_scale (a device float, may be null) multiplies
// every g first: a gradient-norm clip folded into the step instead of a separate pass.
void adamw_update(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t, const float* grad_scale, cudaStream_t s);

// ---- gradient utilities ----
// *acc += sum x[i]^2 (acc is one device double; the caller zeroes it)
void sum_squares(double* acc, const float* x, size_t n, cudaStream_t s);
// x[i] *= *scale (a device float, so clipping needs no host round trip)
void scale_inplace(float* x, size_t n, const float* scale, cudaStream_t s);

// Throws anvil::Error naming `what` when the last launch or the stream failed.
void check_launch(const char* what);

// ---- benchmark helpers (device runs only; not used by the model) ----
// Times tree attention on `seqs` causal chains totalling N nodes (random bf16 qkv and dout):
// the best of 6 cudaEvent-timed runs after 2 warm-ups, in seconds; forward, or backward (the
// backward alone, including its Di and summary pre-passes; dqkv is zeroed outside the timing).
// impl: 0 = default (FlashAttention-2 where it applies unless ANVIL_ATTENTION_IMPL=wmma),
// 1 = the wmma kernels, 2 = FlashAttention-2 (attention_fa2.cu).
double bench_tree_attention(int impl, int N, int H, int KVH, int D, int seqs, bool backward);

// ---- generation over a paged KV cache (generate_kernels.cu) ----
// A KV block holds kKvBlock consecutive positions of one sequence for every layer:
// block_ptr[g] -> bf16 [L][2][kKvBlock][KVH*D] (per layer K, then V; K after bias + RoPE). Each
// of the N rows of a step has a position row_pos[r] and the offset row_bt[r] of its sequence's
// block list in block_table (position p lives in block block_table[row_bt[r] + p / kKvBlock],
// slot p % kKvBlock).
constexpr int kKvBlock = 16;
// Writes K and V of every row (qkv[r, H*D : (H + 2*KVH)*D], bf16) into its slot of `layer`.
void paged_kv_write(bf16* const* block_ptr, const bf16* qkv, const int32_t* row_pos, const int32_t* row_bt,
                    const int32_t* block_table, int N, int layer, int H, int KVH, int D, cudaStream_t s);
// out[N, H*D] bf16: for each row and head, softmax(q . k_t / sqrt(D)) over the positions
// t = 0..row_pos[r] of the row's sequence (the cached ones and those written this step), times
// v_t; q = qkv[r, h*D:(h+1)*D], kv head h / (H / KVH). fp32 math, D <= 256.
void paged_attention(bf16* out, const bf16* qkv, bf16* const* block_ptr, const int32_t* row_pos,
                     const int32_t* row_bt, const int32_t* block_table, int N, int layer, int H, int KVH, int D,
                     cudaStream_t s);

}  // namespace cuda
}  // namespace anvil
