// GEMMs of the GPU path through cuBLASLt, in the engine's row-major convention (weights stored
// [out, in] as in PyTorch). cuBLASLt is opened with dlopen at first use (libcublasLt.so.13 from
// ANVIL_CUBLASLT_PATH, the CUDA toolkit or the nvidia-cublas Python wheel), so the addon itself
// links only the static CUDA runtime and loads wherever a driver exists; a missing library is a
// clear error, not a failed dlopen of the whole addon.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace anvil {
namespace cuda {

enum class DType { F32, BF16 };

// One row-major operand: data, dtype and row stride (elements).
struct Mat {
  const void* p;
  DType t;
  int ld;
};

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[N,O] = inp[N,I] @ w[O,I]^T  (+ add[N,O] when add.p != null; add may alias out)
  void nt(void* out, DType out_t, Mat inp, Mat w, int N, int I, int O, Mat add = {nullptr, DType::F32, 0});
  // dinp[N,I] = dout[N,O] @ w[O,I]  (+ dinp when accumulate)
  void nn(void* dinp, DType dinp_t, Mat dout, Mat w, int N, int I, int O, bool accumulate = false);
  // dw[O,I] (fp32) += dout[N,O]^T @ inp[N,I]
  void tn_acc(float* dw, Mat dout, Mat inp, int N, int I, int O);

  // The same products with a scale and a row stride on the output (LoRA writes a column block of a
  // fused output, scaled by alpha / r):
  // out[N,O] (row stride ldo) = alpha * inp[N,I] @ w[O,I]^T + beta * out
  void nt_strided(void* out, DType out_t, int ldo, Mat inp, Mat w, int N, int I, int O, float alpha, float beta);
  // dinp[N,I] (row stride ldi) = alpha * dout[N,O] @ w[O,I] + beta * dinp
  void nn_strided(void* dinp, DType dinp_t, int ldi, Mat dout, Mat w, int N, int I, int O, float alpha, float beta);
  // dw[O,I] (fp32) += alpha * dout[N,O]^T @ inp[N,I]
  void tn_acc_scaled(float* dw, Mat dout, Mat inp, int N, int I, int O, float alpha);

  // Which library was opened (path and version) — for engineInfo().
  static std::string library();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace cuda
}  // namespace anvil
