// Where a producer leaves a row's amax for the FP8 quantize (kernels/amax_bits.cuh): a token's
// max |x| spread over kAmaxSpread slots 128 bytes apart, each warp raising one by its index. With
// a single slot a token, the one-token SwiGLU GEMV's 18,944 warps a layer (one output each) queued
// their atomics on one address: FP8 7B batch 1 +4.1% (H100, NOTES.md v61). Readers take the max
// of a token's slots, a lane a slot.
#pragma once

namespace tandem::kernels {

constexpr int kAmaxSpread = 32;                             // slots a token (a lane each to read)
constexpr int kAmaxStride = 32;                             // words between them: 128 bytes
constexpr int kAmaxTokenWords = kAmaxSpread * kAmaxStride;  // a token's slots, in words

}  // namespace tandem::kernels
