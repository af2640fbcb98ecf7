// The GPU side of a Model (CUDA build only): fp32 master weights with a bf16 copy, fp32
// gradients and AdamW moments on the device, and the prefix-merged forward/backward over a packed
// tree. The host Model's arenas stay the place where weights are loaded and saved: push_params()
// and pull_params()/pull_grads() move them (the JavaScript Model does this around load/save).
// Host-only header: no CUDA types, so addon.cc compiles with the plain C++ compiler.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../model.h"

namespace anvil {
namespace cuda {

// What the loader reports when it decides between the CUDA and the CPU backend. Never throws.
struct DeviceProbe {
  bool ok = false;
  std::string why;  // when !ok: no driver, no device, ...
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  size_t total_bytes = 0;
  int driver_version = 0, runtime_version = 0;
};
DeviceProbe probe_device();

class Gemm;

// What the GPU generator (generate_cuda.cu) reads of a device model: the weights in the host arena
// layout (fp32 masters and their bf16 copy: an optimizer step is visible to the next generation
// step with no copy), the model's stream and its GEMM handle. Valid while the DeviceModel lives;
// use only under Model::mu (the stream and the GEMM handle are the model's own).
struct DeviceView {
  int device = 0;
  void* stream = nullptr;   // cudaStream_t
  const float* p32 = nullptr;
  const void* p16 = nullptr;  // bf16
  Gemm* gemm = nullptr;
};

// Device activations of one forward (defined in device_model.cu); Activations::dev owns one.
struct DeviceActs;

struct ForwardBytes {
  size_t kept = 0, forward_scratch = 0, backward_scratch = 0;
};

class DeviceModel {
 public:
  explicit DeviceModel(Model& host);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // These include the LoRA adapters while the model has them (params, and grads: the adapters'
  // alone then, the frozen base has none on the device either).
  void push_params();  // host params -> device fp32 master and bf16 copy
  void pull_params();  // device fp32 master -> host params
  void pull_grads();   // device grads -> host grads
  // The host model's LoRA adapters were enabled, replaced, merged or dropped (caller holds the
  // model's lock): mirror them (upload the adapters; free the base's gradients and moments while
  // they are on, or give the base zeroed gradients back when they are gone).
  void lora_changed();

  // Forward over a packed tree (tree and tokens in the caller's node order; logp/entropy [N]
  // host outputs in that order). max_bytes (0 = none) limits the device bytes of the pack.
  // lora: the host's adapters (the ones lora_changed() mirrored, or null); drop / dropout_seed: a
  // training forward's LoRA dropout (the CPU's masks).
  std::shared_ptr<DeviceActs> forward(const TreeInfo& tree, const int32_t* tokens, float* logp, float* entropy,
                                      LogitsMode mode, double max_bytes, ForwardBytes* bytes, const LoraState* lora = nullptr,
                                      bool drop = false, uint64_t dropout_seed = 0);
  // Accumulates parameter gradients; dlogp/dentropy [N] host arrays in the caller's node order.
  void backward(DeviceActs& acts, const float* dlogp, const float* dentropy);

  // Gradients, clipping, AdamW and its moments work on the trainable parameters: the LoRA
  // adapters while the model has them (decay then has one entry per adapter tensor), else the base.
  void zero_grad();
  double grad_norm();
  double clip_grad_norm(double max_norm);  // returns the norm before clipping
  void adamw(const std::vector<uint8_t>& decay, float lr, float beta1, float beta2, float eps, float weight_decay,
             int step);

  // AdamW's moments [P] each, in the host arena's order, for checkpoints that resume exactly.
  // pull_moments returns false (and writes nothing) before the first step; push_moments allocates
  // them when needed. Both finish before they return.
  bool pull_moments(float* m_out, float* v_out);
  void push_moments(const float* m_in, const float* v_in);

  size_t param_bytes() const;      // fp32 master + bf16 copy
  size_t grad_bytes() const;
  size_t optimizer_bytes() const;  // 0 before the first step
  size_t cached_bytes();           // freed activation memory the device pool keeps for reuse
  void trim_cache();
  // What the GPU generator reads; throws while LoRA adapters are on (it would ignore them). A
  // generator made before adapters were enabled keeps generating from the base alone.
  DeviceView view() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Times one cuBLASLt bf16 GEMM C[M,N] = A[M,K] B[N,K]^T (fp32 accumulate, bf16 out): the roofline
// reference of the engine-cuda benchmark. Returns seconds of the fastest run.
double bench_gemm_bf16(int M, int N, int K, double min_seconds);

// "cuBLASLt <path> (version n)" once it has been opened, else why it cannot be.
std::string gemm_library();

}  // namespace cuda
}  // namespace anvil
