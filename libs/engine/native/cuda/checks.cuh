// GPU kernels checked against the CPU reference kernels (../kernels.h) on random inputs, run on a
// machine with a device through the addon's checkKernels() export.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anvil {
namespace cuda {

// One comparison of a GPU kernel output with the CPU reference's. Passed iff every element
// satisfies |gpu - cpu| <= atol + rtol * |cpu|, with atol/rtol scaled to the dtypes involved
// (bf16 operands: rtol ~ 2^-8 times a factor for the reduction length; fp32: ~1e-5).
struct KernelCheck {
  std::string name;     // e.g. "rmsnorm_forward bf16 N=37 C=96"
  double max_abs_err;   // max |gpu - cpu|
  double max_ref;       // max |cpu|
  double atol, rtol;
  int64_t failures;     // elements outside the tolerance
  bool passed;
  std::string detail;   // first failing index and values, or empty
};

// elementwise.cu owner: conversions, gathers, embedding, rmsnorm, rope, swiglu, logprob, adamw,
// sum_squares/scale
std::vector<KernelCheck> check_elementwise_kernels(uint64_t seed);
// attention.cu owner: tree attention forward/backward on chains, forests and bushy trees, several
// head dims (the tensor-core path and the fallback), GQA
std::vector<KernelCheck> check_attention_kernels(uint64_t seed);
// generate_cuda.cu owner (checks_generation.cc): the GPU generator against the CPU Generator on
// small random models (greedy tokens, raw logprobs, prefix-cache hits, teacher-forced logprobs)
std::vector<KernelCheck> check_generation(uint64_t seed);

}  // namespace cuda
}  // namespace anvil
