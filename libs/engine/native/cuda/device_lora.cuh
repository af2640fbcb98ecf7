// The LoRA adapters of a device model (see ../lora.h for the formulation): fp32 masters, a bf16
// copy for the GEMMs, fp32 gradients and AdamW moments, all in the host LoraState's arena layout,
// and the forward / backward of one layer's adapted projections, mirroring lora_layer_forward /
// lora_layer_backward of the CPU reference step by step. Shapes as in kernels.cuh; r = rank.
//
// Dtypes: x (the group's input: ln1, att, ln2, h), u = A dropout(x) [N, r] and du are bf16 GEMM
// operands; the adapters' gradients accumulate in fp32; y / dx accumulate in the dtype the base
// model keeps them in (qkv and gate|up bf16, the residual stream and dln / dh fp32, datt bf16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../lora.h"
#include "gemm.h"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

struct DeviceLora {
  const LoraState* host = nullptr;  // the adapters mirrored (null: none)
  size_t n = 0;                     // adapter parameters
  float* p32 = nullptr;             // [n] masters
  bf16* p16 = nullptr;              // [n] bf16 copy, refreshed by every upload and optimizer step
  float* g32 = nullptr;             // [n] gradients
  float* m32 = nullptr;             // [n] AdamW moments, allocated at the first step
  float* v32 = nullptr;

  // Frees every buffer (the caller has synchronised the stream).
  void release();
  // Allocates the buffers for `st` and uploads its parameters; gradients start at zero.
  void attach(const LoraState* st, cudaStream_t s);
  void push(cudaStream_t s);        // host parameters -> p32, p16
  void pull(cudaStream_t s);        // p32 -> host parameters
  void pull_grads(cudaStream_t s);  // g32 -> host gradients
  void alloc_moments(cudaStream_t s);
  size_t bytes_params() const { return n * (sizeof(float) + sizeof(bf16)); }
};

// What a forward runs with: the adapters, and for a training forward with dropout its seed and the
// caller's node index of every pre-order row (the mask is drawn per node, as on the CPU).
struct LoraRun {
  const LoraState* lora = nullptr;
  bool drop = false;
  uint64_t seed = 0;
};

// y (the group's fused output, [N, ldy] of dtype yt, column 0) += every adapted projection of the
// group applied to x [N, I] bf16; u[site] [N, r] bf16 keeps A dropout(x) for the backward. With
// drop, x is dropped out per site into xd [N, max_in] bf16 first (node [N]: caller node ids).
void lora_group_forward(const DeviceLora& L, Gemm& g, int layer, int group, void* y, DType yt, const bf16* x, int N,
                        bf16* const* u, bool drop, uint64_t seed, const int32_t* node, bf16* xd, cudaStream_t s);
// The backward: adapter gradients accumulate into L.g32, dx [N, I] (dtype dxt) += the adapters'
// input gradient, given dy = the gradient of the group's fused output ([N, ldy] bf16). Scratch:
// du [N, r] bf16; with drop also xd [N, max_in] bf16 and dxd [N, max_in] fp32.
void lora_group_backward(const DeviceLora& L, Gemm& g, int layer, int group, void* dx, DType dxt, const bf16* dy,
                         const bf16* x, int N, bf16* const* u, bool drop, uint64_t seed, const int32_t* node, bf16* xd,
                         float* dxd, bf16* du, cudaStream_t s);

}  // namespace cuda
}  // namespace anvil
