// CUDA-build additions to the addon's exports (addon.cc includes this only with ANVIL_WITH_CUDA):
// info() fields about the device, checkKernels() (every GPU kernel against the CPU reference, and
// the GPU generator against the CPU one), benchGemmBf16() (the cuBLASLt roofline of the
// engine-cuda benchmark) and benchDecodeCuda() (GPU generation decode tokens/s).
#pragma once

#include <napi.h>

namespace anvil {
namespace cuda {

void add_info(Napi::Env env, Napi::Object& info);
void add_exports(Napi::Env env, Napi::Object& exports);

}  // namespace cuda
}  // namespace anvil
