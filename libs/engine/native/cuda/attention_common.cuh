// What the two tree-attention implementations share (internal to attention.cu and
// attention_fa2.cu; the public contract is kernels.cuh): the tile size of the mask summaries, the
// workspace carving, the implementation switch and the FlashAttention-2 entry points that
// attention.cu dispatches to.
//
// Workspace: [tile maxEnd nT ints][tile minEnd nT ints] (256-aligned) [Di N*H floats]. The
// summaries (attention.cu's tile_summary_kernel) hold, for every tile of BT consecutive keys, the
// max and min of end[] over its keys; Di (attention.cu's rowdot_kernel) = rowsum(dO * O) per
// (node, head). Both are written by tree_attention_forward/backward before either
// implementation's kernels run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels.cuh"

namespace anvil {
namespace cuda {
namespace attn {

constexpr int BT = 64;  // keys per summary tile (and the tile size of both implementations)
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct Workspace {
  int* tmax;
  int* tmin;
  float* di;
};
inline int num_tiles(int N) { return (N + BT - 1) / BT; }
inline Workspace carve(void* ws, int N) {
  const size_t nT = (size_t)num_tiles(N);
  char* p = static_cast<char*>(ws);
  Workspace w;
  w.tmax = reinterpret_cast<int*>(p);
  w.tmin = w.tmax + nT;
  w.di = reinterpret_cast<float*>(p + align_up(2 * nT * sizeof(int), 256));
  return w;
}

// Implementation switch. kAuto: the FlashAttention-2 kernels where they apply (fa2_supports),
// unless the environment sets ANVIL_ATTENTION_IMPL=wmma; kWmma: the nvcuda::wmma kernels (or the
// SIMT fallback); kFa2: FlashAttention-2 where it applies, else as kWmma. set_impl is process-wide
// (checks and benchmarks set it around their calls; not thread-safe).
enum Impl : int { kAuto = 0, kWmma = 1, kFa2 = 2 };
void set_impl(int impl);
int get_impl();
// whether the FlashAttention-2 path should run for head dim D (impl switch + env + shape)
bool use_fa2(int D);
// shapes the FlashAttention-2 kernels take (D = 64 or 128; pointers checked by the caller)
inline bool fa2_supports(int D) { return D == 64 || D == 128; }

// FlashAttention-2 launches (attention_fa2.cu). The summaries (and Di for the backward) must be in
// w already. Pointers 16-byte aligned (dqkv too: vector atomics).
void fa2_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* end, const Workspace& w, int N, int H,
                 int KVH, int D, cudaStream_t s);
void fa2_backward(float* dqkv, const bf16* dout, const float* lse, const bf16* qkv, const int32_t* end,
                  const Workspace& w, int N, int H, int KVH, int D, cudaStream_t s);

}  // namespace attn
}  // namespace cuda
}  // namespace anvil
