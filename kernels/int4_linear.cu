#include "int4_linear.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.cuh"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

// x staged in chunks within the default 48 KB, so several blocks share an SM.
constexpr int kSmemBytes = 48 * 1024;

// bf16x2 a + b in one instruction (fma with 1.0).
__device__ __forceinline__ uint32_t bf16x2_add(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3F803F80u), "r"(b));
  return d;
}

// One k-step word → the A registers, (q − zero) exact in bf16: 0x4300 | q is 128 + q, and
// zero_lo / zero_hi hold −(128 + zero) of rows j and j + 8 (registers 0, 2 and 1, 3).
__device__ __forceinline__ void unpack(uint32_t w, uint32_t zero_lo, uint32_t zero_hi,
                                       uint32_t (&a)[4]) {
  a[0] = bf16x2_add((w & 0x000F000Fu) | 0x43004300u, zero_lo);
  a[1] = bf16x2_add(((w >> 4) & 0x000F000Fu) | 0x43004300u, zero_hi);
  a[2] = bf16x2_add(((w >> 8) & 0x000F000Fu) | 0x43004300u, zero_lo);
  a[3] = bf16x2_add(((w >> 12) & 0x000F000Fu) | 0x43004300u, zero_hi);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// −(128 + z) as bf16x2 bits: 128 + z (z <= 16) is 0x4300 | z.
__device__ __forceinline__ uint32_t neg_zero_bits(uint32_t z) {
  return (0xC300u | z) * 0x10001u;
}

// Scale and zero words of one group for lane row pair (j, j + 8): half2, byte pair.
struct GroupWords {
  uint32_t scales = 0;
  uint32_t zeros = 0;
};

// Everything one pair of 32-feature blocks needs, loaded together so that one memory latency
// covers all of it: the lane's 16 weight bytes, both blocks' group words, and (x read from L2)
// token j's features 8q .. 8q + 7 of both blocks.
struct PairSlot {
  uint4 q = {};
  GroupWords g0, g1;
  uint4 x0 = {}, x1 = {};
};

// Group of block b: (b + 0.5) / blocks_per_group, rounded down, exact for b < 4e6.
__device__ __forceinline__ int group_of(int b, float inv_blocks_per_group) {
  return __float2int_rz(__fmul_rn(float(b) + 0.5f, inv_blocks_per_group));
}

__device__ __forceinline__ float half_lo(uint32_t h2) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xffffu)));
}
__device__ __forceinline__ float half_hi(uint32_t h2) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 >> 16)));
}

// acc += scale · part, rows j (0, 1) and j + 8 (2, 3); part restarts.
__device__ __forceinline__ void flush(float (&acc)[4], float (&part)[4], uint32_t scales) {
  const float lo = half_lo(scales), hi = half_hi(scales);
  acc[0] = fmaf(lo, part[0], acc[0]);
  acc[1] = fmaf(lo, part[1], acc[1]);
  acc[2] = fmaf(hi, part[2], acc[2]);
  acc[3] = fmaf(hi, part[3], acc[3]);
#pragma unroll
  for (int i = 0; i < 4; ++i) part[i] = 0.0f;
}

// One 32-feature block: two k-steps of 16 into part.
__device__ __forceinline__ void block_mma(float (&part)[4], uint32_t w0, uint32_t w1, uint32_t z,
                                          uint4 xv) {
  const uint32_t zero_lo = neg_zero_bits(z & 0xffu), zero_hi = neg_zero_bits(z >> 8);
  uint32_t a[4];
  unpack(w0, zero_lo, zero_hi, a);
  mma_bf16(part, a, xv.x, xv.y);
  unpack(w1, zero_lo, zero_hi, a);
  mma_bf16(part, a, xv.z, xv.w);
}

// Both blocks of a pair; one scaling when they share a group.
__device__ __forceinline__ void pair_mma(float (&acc)[4], const PairSlot& sl, uint4 x0, uint4 x1,
                                         bool pair_in_group) {
  float part[4] = {0, 0, 0, 0};
  block_mma(part, sl.q.x, sl.q.y, sl.g0.zeros, x0);
  if (!pair_in_group) flush(acc, part, sl.g0.scales);
  block_mma(part, sl.q.z, sl.q.w, sl.g1.zeros, x1);
  flush(acc, part, sl.g1.scales);
}

// Words of x per token in shared memory: the chunk's bf16 plus 64 bytes when that makes the
// stride a multiple of 128 bytes, so two tokens' fragment loads fall in different banks.
__host__ __device__ inline int x_stride_words(int chunk) {
  const int bytes = chunk * 2;
  return (bytes % 128 == 0 ? bytes + 64 : bytes) / 4;
}

// x[:, c0 .. c0 + kc) in its natural order (gathered through perm) at xs + token * stride.
template <int M, int kThreads>
__device__ void stage_x(const __nv_bfloat16* __restrict__ x, const int32_t* __restrict__ perm,
                        int k, int c0, int kc, int stride, uint32_t* xs) {
  const int units = kc / 8;  // 8 features each
  for (int u = threadIdx.x; u < M * units; u += kThreads) {
    const int tok = u / units, j = u % units;
    const int f = c0 + 8 * j;
    uint4 v;
    if (perm == nullptr) {
      v = __ldg(reinterpret_cast<const uint4*>(x + int64_t(tok) * k + f));
    } else {
      const unsigned short* xt = reinterpret_cast<const unsigned short*>(x) + int64_t(tok) * k;
      const int4 p0 = __ldg(reinterpret_cast<const int4*>(perm + f));
      const int4 p1 = __ldg(reinterpret_cast<const int4*>(perm + f + 4));
      v.x = uint32_t(__ldg(xt + p0.x)) | (uint32_t(__ldg(xt + p0.y)) << 16);
      v.y = uint32_t(__ldg(xt + p0.z)) | (uint32_t(__ldg(xt + p0.w)) << 16);
      v.z = uint32_t(__ldg(xt + p1.x)) | (uint32_t(__ldg(xt + p1.y)) << 16);
      v.w = uint32_t(__ldg(xt + p1.z)) | (uint32_t(__ldg(xt + p1.w)) << 16);
    }
    reinterpret_cast<uint4*>(xs + tok * stride)[j] = v;
  }
}

// Block: kWarps / kSplits row tiles of 16, each by kSplits warps splitting k into contiguous
// slices of pairs; each warp keeps kDepth pairs in flight. kStage: x through shared memory (in
// chunks of `chunk` features when m * k is large), else each lane reads its x from L2 (no perm).
template <int M, int kWarps, int kSplits, int kDepth, bool kStage>
__global__ void __launch_bounds__(kWarps * 32)
    int4_gemv_kernel(const __nv_bfloat16* __restrict__ x, Int4Matrix w, int chunk,
                     float inv_blocks_per_group, void* __restrict__ y, int ldy, bool out_f32) {
  constexpr int kTiles = kWarps / kSplits;
  constexpr int kThreads = kWarps * 32;
  static_assert(kTiles * kSplits == kWarps, "splits divide the warps");
  extern __shared__ uint4 smem[];
  const int stride = kStage ? x_stride_words(chunk) : 0;
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem);        // [M, stride]
  float* red = reinterpret_cast<float*>(xs + M * stride);  // [kWarps, 16, M] when kSplits > 1

  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = lane >> 2, quad = lane & 3;
  const int tile = blockIdx.x * kTiles + warp / kSplits;
  const int split = warp % kSplits;
  const bool active = tile < (w.n + 15) / 16;
  const int k = w.k;
  const int pairs = k / 64;
  const bool odd_block = (k / 32) % 2 == 1;
  const int groups = k / w.group_size;
  const bool pair_in_group = w.group_size % 64 == 0;

  const uint4* qtile = reinterpret_cast<const uint4*>(w.qweight + int64_t(tile) * 2 * k) + lane;
  const uint32_t* stile =
      reinterpret_cast<const uint32_t*>(w.scales) + int64_t(tile) * groups * 8 + j;
  const uint16_t* ztile =
      reinterpret_cast<const uint16_t*>(w.zeros) + int64_t(tile) * groups * 8 + j;
  auto group_words = [&](int b) {
    const int g = group_of(b, inv_blocks_per_group);
    GroupWords gw;
    gw.scales = __ldg(stile + g * 8);
    gw.zeros = __ldg(ztile + g * 8);
    return gw;
  };
  auto load_weights = [&](PairSlot& sl, int p) {
    sl.q = __ldcs(qtile + p * 32);
    sl.g0 = group_words(2 * p);
    sl.g1 = pair_in_group ? sl.g0 : group_words(2 * p + 1);
  };
  // Lanes j >= M hold no token: their x stays zero.
  const uint4* xrow = reinterpret_cast<const uint4*>(x + int64_t(j) * k) + quad;
  auto load_x = [&](PairSlot& sl, int p) {
    if (j < M) {
      sl.x0 = __ldg(xrow + p * 8);
      sl.x1 = __ldg(xrow + p * 8 + 4);
    }
  };
  const uint4* xfrag = reinterpret_cast<const uint4*>(xs + j * stride) + quad;
  auto staged_x = [&](int b) {  // block b of the chunk
    return j < M ? xfrag[b * 4] : make_uint4(0, 0, 0, 0);
  };

  float acc[4] = {0, 0, 0, 0};
  for (int c0 = 0; c0 < k; c0 += chunk) {
    const int kc = min(chunk, k - c0);
    // This warp's pairs of the chunk, and the odd last block for the last warp of a tile.
    const int chunk_pairs = kc / 64;
    const int p0 = c0 / 64 + chunk_pairs * split / kSplits;
    const int p1 = c0 / 64 + chunk_pairs * (split + 1) / kSplits;
    const bool tail = active && odd_block && c0 + kc == k && split == kSplits - 1;

    // Weights never depend on the previous kernel: in flight before the wait.
    PairSlot ring[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u)
      if (active && p0 + u < p1) load_weights(ring[u], p0 + u);
    if (c0 == 0) pdl_wait();  // x is the previous kernel's output
    if constexpr (kStage) {
      if (c0 > 0) __syncthreads();  // every warp is done with the previous chunk
      stage_x<M, kThreads>(x, w.perm, k, c0, kc, stride, xs);
      __syncthreads();
    } else {
#pragma unroll
      for (int u = 0; u < kDepth; ++u)
        if (active && p0 + u < p1) load_x(ring[u], p0 + u);
    }
    if (!active) continue;

    // Slot u holds pair base + u; once used it is refilled with pair base + u + kDepth.
    for (int base = p0; base < p1; base += kDepth) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int p = base + u;
        if (p < p1) {
          if constexpr (kStage) {
            const int b = 2 * (p - c0 / 64);
            pair_mma(acc, ring[u], staged_x(b), staged_x(b + 1), pair_in_group);
          } else {
            pair_mma(acc, ring[u], ring[u].x0, ring[u].x1, pair_in_group);
          }
          if (p + kDepth < p1) {
            load_weights(ring[u], p + kDepth);
            if constexpr (!kStage) load_x(ring[u], p + kDepth);
          }
        }
      }
    }
    if (tail) {
      const uint2 q = __ldcs(
          reinterpret_cast<const uint2*>(w.qweight + int64_t(tile) * 2 * k + pairs * 128) + lane);
      const GroupWords gw = group_words(2 * pairs);
      uint4 xv;
      if constexpr (kStage) {
        xv = staged_x(2 * (pairs - c0 / 64));
      } else {
        xv = j < M ? __ldg(xrow + pairs * 8) : make_uint4(0, 0, 0, 0);
      }
      float part[4] = {0, 0, 0, 0};
      block_mma(part, q.x, q.y, gw.zeros, xv);
      flush(acc, part, gw.scales);
    }
  }

  // C fragment: acc[0..1] row j, tokens 2 * quad + 0..1; acc[2..3] row j + 8.
  auto store = [&](int tok, int r, float v) {
    if (out_f32) {
      static_cast<float*>(y)[int64_t(tok) * ldy + r] = v;
    } else {
      static_cast<__nv_bfloat16*>(y)[int64_t(tok) * ldy + r] = __float2bfloat16(v);
    }
  };
  if constexpr (kSplits == 1) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int tok = 2 * quad + e;
      if (active && tok < M) {
        if (tile * 16 + j < w.n) store(tok, tile * 16 + j, acc[e]);
        if (tile * 16 + j + 8 < w.n) store(tok, tile * 16 + j + 8, acc[2 + e]);
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int tok = 2 * quad + e;
      if (tok < M) {
        red[(warp * 16 + j) * M + tok] = acc[e];
        red[(warp * 16 + j + 8) * M + tok] = acc[2 + e];
      }
    }
    __syncthreads();
    for (int o = threadIdx.x; o < kTiles * 16 * M; o += kThreads) {
      const int local = o / (16 * M), row = (o / M) % 16, tok = o % M;
      const int r = (blockIdx.x * kTiles + local) * 16 + row;
      if (r >= w.n) continue;
      float v = 0.0f;
      for (int s = 0; s < kSplits; ++s) v += red[((local * kSplits + s) * 16 + row) * M + tok];
      store(tok, r, v);
    }
  }
}

template <int M, int kWarps, int kSplits, int kDepth, bool kStage>
void launch_gemv_m(const __nv_bfloat16* x, const Int4Matrix& w, void* y, int32_t ldy, bool out_f32,
                   cudaStream_t stream) {
  constexpr int kTiles = kWarps / kSplits;
  const int tiles = (w.n + 15) / 16;
  const size_t reduce_bytes = kSplits > 1 ? size_t(kWarps) * 16 * M * 4 : 0;
  int chunk = w.k;
  size_t smem = reduce_bytes;
  if (kStage) {
    chunk = int((kSmemBytes - reduce_bytes) / M - 64) / 2 / 64 * 64;
    if (chunk > w.k) chunk = w.k;
    smem += size_t(M) * x_stride_words(chunk) * 4;
  }
  const int blocks = (tiles + kTiles - 1) / kTiles;
  const float inv_blocks_per_group = 1.0f / float(w.group_size / 32);
  launch_pdl(int4_gemv_kernel<M, kWarps, kSplits, kDepth, kStage>, dim3(blocks), dim3(kWarps * 32),
             smem, stream, x, w, chunk, inv_blocks_per_group, y, ldy, out_f32);
}

// A variant; without staging it still stages x when there is a perm to gather through.
template <int kWarps, int kSplits, int kDepth, bool kStage>
void launch_variant(const __nv_bfloat16* x, const Int4Matrix& w, int32_t m, void* y, int32_t ldy,
                    bool out_f32, cudaStream_t stream) {
  if constexpr (!kStage) {
    if (w.perm != nullptr) {
      launch_variant<kWarps, kSplits, kDepth, true>(x, w, m, y, ldy, out_f32, stream);
      return;
    }
  }
  static_assert(kInt4GemvMaxTokens == 4, "one instantiation per token count");
  switch (m) {
    case 1:
      launch_gemv_m<1, kWarps, kSplits, kDepth, kStage>(x, w, y, ldy, out_f32, stream);
      break;
    case 2:
      launch_gemv_m<2, kWarps, kSplits, kDepth, kStage>(x, w, y, ldy, out_f32, stream);
      break;
    case 3:
      launch_gemv_m<3, kWarps, kSplits, kDepth, kStage>(x, w, y, ldy, out_f32, stream);
      break;
    default:
      launch_gemv_m<4, kWarps, kSplits, kDepth, kStage>(x, w, y, ldy, out_f32, stream);
      break;
  }
}

using VariantLaunch = void (*)(const __nv_bfloat16*, const Int4Matrix&, int32_t, void*, int32_t,
                               bool, cudaStream_t);
struct Variant {
  const char* name;  // w<warps per block>s<splits of k>d<pairs in flight>_<x through smem/ldg>
  VariantLaunch launch;
};
constexpr Variant kVariants[] = {
    {"w8s8d4_smem", launch_variant<8, 8, 4, true>},  // the first kernel's shape
    {"w8s8d8_smem", launch_variant<8, 8, 8, true>},  // all of a small shape's loads at once
    {"w8s8d4_ldg", launch_variant<8, 8, 4, false>},
    {"w16s16d2_ldg", launch_variant<16, 16, 2, false>},  // few registers, many warps
    {"w16s16d4_ldg", launch_variant<16, 16, 4, false>},  // more warps for few tiles, long k
    {"w16s16d4_smem", launch_variant<16, 16, 4, true>},
    {"w8s4d8_smem", launch_variant<8, 4, 8, true>},  // two tiles a block
    {"w8s4d4_ldg", launch_variant<8, 4, 4, false>},
    {"w4s4d8_smem", launch_variant<4, 4, 8, true>},  // small blocks
    {"w8s2d8_smem", launch_variant<8, 2, 8, true>},  // four tiles a block: many tiles
    {"w4s1d8_smem", launch_variant<4, 1, 8, true>},  // a warp per tile, no reduction
    {"w4s1d4_ldg", launch_variant<4, 1, 4, false>},
};
constexpr int kVariantCount = int(sizeof(kVariants) / sizeof(kVariants[0]));

int multiprocessors() {
  static const int count = [] {
    int device = 0, sms = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&device));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

int variant_index(const char* name) {
  for (int i = 0; i < kVariantCount; ++i)
    if (std::strcmp(kVariants[i].name, name) == 0) return i;
  std::abort();
}

// One thread per qweight word: its 8 weights, rows j and j + 8 of a tile, to bf16.
__global__ void int4_dequant_kernel(Int4Matrix w, __nv_bfloat16* __restrict__ out) {
  const int64_t k = w.k;
  const int64_t words = int64_t((w.n + 15) / 16) * 2 * k;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= words) return;
  const int64_t tile = idx / (2 * k);
  const int64_t o = idx % (2 * k);
  const int64_t pairs = k / 64;
  int64_t b;
  int lane, s;
  if (o < pairs * 128) {
    b = 2 * (o / 128) + (o % 4) / 2;
    lane = int((o % 128) / 4);
    s = int(o % 2);
  } else {
    b = 2 * pairs;
    lane = int((o - pairs * 128) / 2);
    s = int(o % 2);
  }
  const int j = lane / 4;
  const int64_t f0 = b * 32 + 8 * (lane % 4) + 4 * s;
  const int64_t group = b * 32 / w.group_size;
  const int64_t groups = k / w.group_size;
  const uint32_t word = w.qweight[idx];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = tile * 16 + j + 8 * h;
    if (r >= w.n) continue;
    const int64_t at = (tile * groups + group) * 16 + 2 * j + h;
    const float scale = __half2float(w.scales[at]);
    const int zero = w.zeros[at];
#pragma unroll
    for (int c = 0; c < 2; ++c) {  // features f0 + 2c, f0 + 2c + 1: register m = h + 2c
      const int m = h + 2 * c;
      const int64_t f = f0 + 2 * c;
      const __nv_bfloat16 v0 = __float2bfloat16(float(int((word >> (4 * m)) & 15u) - zero) * scale);
      const __nv_bfloat16 v1 =
          __float2bfloat16(float(int((word >> (4 * (m + 4))) & 15u) - zero) * scale);
      __nv_bfloat16* row = out + r * k;
      if (w.perm == nullptr) {
        *reinterpret_cast<__nv_bfloat162*>(row + f) = __halves2bfloat162(v0, v1);
      } else {
        row[w.perm[f]] = v0;
        row[w.perm[f + 1]] = v1;
      }
    }
  }
}

bool valid(const Int4Matrix& w) {
  return w.n > 0 && w.k > 0 && w.k % 32 == 0 && w.group_size > 0 && w.group_size % 32 == 0 &&
         w.k % w.group_size == 0;
}

}  // namespace

namespace {

void check_gemv(const Int4Matrix& w, int32_t m, int32_t ldy) {
  if (m < 1 || m > kInt4GemvMaxTokens || !valid(w) || ldy < w.n) {
    std::fprintf(stderr, "int4 gemv: unsupported m=%d n=%d k=%d group_size=%d ldy=%d\n", m, w.n,
                 w.k, w.group_size, ldy);
    std::abort();
  }
}

}  // namespace

int int4_gemv_variant_count() {
  return kVariantCount;
}

const char* int4_gemv_variant_name(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].name : "?";
}

// A guess before measurements: few tiles want k split finely so that every SM has warps and
// each warp's loads are all in flight at once; many tiles share staged x across four tiles.
int int4_gemv_default_variant(int32_t n, int32_t k, int32_t m, bool perm) {
  (void)m;
  (void)perm;
  const int tiles = (n + 15) / 16;
  if (tiles >= 8 * multiprocessors()) return variant_index("w8s2d8_smem");
  if (k > 8192) return variant_index("w16s16d4_smem");
  return variant_index("w8s8d8_smem");
}

void launch_int4_gemv_variant(int variant, const __nv_bfloat16* x, const Int4Matrix& w, int32_t m,
                              void* y, int32_t ldy, bool out_f32, cudaStream_t stream) {
  check_gemv(w, m, ldy);
  if (variant < 0 || variant >= kVariantCount) {
    std::fprintf(stderr, "int4 gemv: no variant %d\n", variant);
    std::abort();
  }
  kVariants[variant].launch(x, w, m, y, ldy, out_f32, stream);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_int4_gemv(const __nv_bfloat16* x, const Int4Matrix& w, int32_t m, void* y, int32_t ldy,
                      bool out_f32, cudaStream_t stream) {
  check_gemv(w, m, ldy);
  kVariants[int4_gemv_default_variant(w.n, w.k, m, w.perm != nullptr)].launch(x, w, m, y, ldy,
                                                                              out_f32, stream);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_int4_dequant(const Int4Matrix& w, __nv_bfloat16* out, cudaStream_t stream) {
  if (!valid(w)) {
    std::fprintf(stderr, "int4 dequant: unsupported n=%d k=%d group_size=%d\n", w.n, w.k,
                 w.group_size);
    std::abort();
  }
  const int64_t words = int64_t((w.n + 15) / 16) * 2 * w.k;
  const int threads = 256;
  int4_dequant_kernel<<<unsigned((words + threads - 1) / threads), threads, 0, stream>>>(w, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
