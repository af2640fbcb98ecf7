// LoRA dropout's mask, shared by the CPU kernels (lora.cc) and the CUDA ones (cuda/lora.cu) so that
// both backends drop exactly the same elements: element e of a site's input is kept iff
// lora_dropout_bits(seed, e) >= lora_dropout_threshold(p), e = node * I + i (see lora.h).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define ANVIL_HOST_DEVICE __host__ __device__
#else
#define ANVIL_HOST_DEVICE
#endif

namespace anvil {

// 24 uniform bits from (seed, e): the splitmix64 finaliser of a Weyl sequence.
ANVIL_HOST_DEVICE inline uint32_t lora_dropout_bits(uint64_t seed, uint64_t e) {
  uint64_t z = seed + (e + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (uint32_t)(z >> 40);
}

// Drop probability p as a threshold on those 24 bits.
inline uint32_t lora_dropout_threshold(float p) { return (uint32_t)((double)p * 16777216.0); }

}  // namespace anvil
