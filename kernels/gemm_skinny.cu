#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

#include "cuda_check.cuh"
#include "device_info.cuh"
#include "env_knob.h"
#include "gemm_skinny.cuh"
#include "mma_sm80.cuh"
#include "pdl.cuh"
#include "silu_mul.cuh"

namespace tandem::kernels {
namespace {

// One block owns kTiles × 16 weight rows (each 16 the A operand of an mma) over all of k, for
// up to 8 · kNTiles tokens (each 8 the B operand). Its kWarps warps split k by chunks of kChunk
// features (warp w takes chunks w, w + kWarps, ...), each warp with its own kStages-deep
// cp.async ring, so no block barrier runs until the end, where the warps' partial sums meet in
// shared memory and warp 0 adds them in warp order.
template <int kChunk, int kStages, int kWarps, int kTiles, int kNTiles>
struct Shape {
  static constexpr int kPieces = kChunk / 8;        // 16-byte pieces of a row per chunk
  static constexpr int kRows = 16 * kTiles;         // weight rows per block
  static constexpr int kTokens = 8 * kNTiles;       // token columns
  static constexpr int kWElems = kRows * kChunk;    // [kRows, kChunk] bf16 per stage
  static constexpr int kXElems = kTokens * kChunk;  // [kTokens, kChunk] bf16 per stage
  static constexpr int kStageElems = kWElems + kXElems;
  static constexpr size_t kSmemBytes = size_t(kWarps) * kStages * kStageElems * 2;
  static_assert(kPieces >= 8, "the XOR swizzle spans 8 pieces");
  static_assert(size_t(kWarps) * kTiles * kNTiles * 32 * 16 <= kSmemBytes,
                "the reduction reuses the ring");
};

// A row's piece c lives at slot c ^ (row & 7): the 8 rows an ldmatrix reads sit in 8 different
// bank groups although each row starts at the same bank.
__device__ __forceinline__ int swizzled(int row, int piece, int chunk) {
  return row * chunk + ((piece ^ (row & 7)) << 3);
}

enum class Epilogue { kStore, kSwiglu, kRope };

// n: output rows (kStore), the gate|up width (kSwiglu) or the q|k|v rows' rotary pairs (kRope:
// (H + 2 KVH) · D / 2). kSwiglu tiles hold 8 gate rows and the 8 up rows of the same outputs,
// kRope's dims i and i + D/2 of 8 head pairs, so one lane ends up with both values it combines.
// `rope`: kRope's target (rope_kv.cuh), unused by the others.
template <int kChunk, int kStages, int kWarps, int kTiles, int kNTiles, Epilogue kEpi, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                  int32_t m, int32_t n, int32_t k, int32_t ldy, Out* __restrict__ y,
                  RopeKvTarget rope, bool lead) {
  using S = Shape<kChunk, kStages, kWarps, kTiles, kNTiles>;
  // `lead`: an overlapped grid resident all at once lets its successor launch at its start, as
  // the GEMVs' one-wave grids do (gemv_warp::lead_trigger); others after their loop (below).
  if (lead) pdl::allow_dependents();
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem) + warp * kStages * S::kStageElems;

  // The weight row behind tile row r (-1 past the end).
  auto weight_row = [&](int r) -> int64_t {
    if constexpr (kEpi == Epilogue::kStore) {
      const int row = blockIdx.x * S::kRows + r;
      return row < n ? row : -1;
    } else {
      const int out = blockIdx.x * (S::kRows / 2) + (r >> 4) * 8 + (r & 7);
      if (out >= n) return -1;
      if constexpr (kEpi == Epilogue::kRope) {
        const int half = rope.s.head_dim / 2;
        return (out / half) * rope.s.head_dim + out % half + ((r & 8) ? half : 0);
      }
      return (r & 8) ? int64_t(n) + out : out;
    }
  };

  const int chunks = (k + kChunk - 1) / kChunk;
  const int mine = warp < chunks ? (chunks - warp + kWarps - 1) / kWarps : 0;
  // This warp's chunk i into ring slot i % kStages: its weight rows, then its token rows.
  auto load_w = [&](int i) {
    const int c0 = (warp + i * kWarps) * kChunk;
    __nv_bfloat16* ws = ring + (i % kStages) * S::kStageElems;
#pragma unroll
    for (int p = lane; p < S::kRows * S::kPieces; p += 32) {
      const int r = p / S::kPieces, c = p % S::kPieces, col = c0 + c * 8;
      const int64_t row = weight_row(r);
      const bool ok = row >= 0 && col < k;
      cp_async16(ws + swizzled(r, c, kChunk), ok ? w + row * k + col : w, ok ? 16 : 0);
    }
  };
  auto load_x = [&](int i) {
    const int c0 = (warp + i * kWarps) * kChunk;
    __nv_bfloat16* xs = ring + (i % kStages) * S::kStageElems + S::kWElems;
#pragma unroll
    for (int p = lane; p < S::kTokens * S::kPieces; p += 32) {
      const int t = p / S::kPieces, c = p % S::kPieces, col = c0 + c * 8;
      const bool ok = t < m && col < k;  // tokens past m multiply as zeros
      cp_async16(xs + swizzled(t, c, kChunk), ok ? x + int64_t(t) * k + col : x, ok ? 16 : 0);
    }
  };

  float acc[kTiles][kNTiles][4] = {};
  // An overlapped launch (pdl.cuh): the first stages' weight rows are copied before the grid
  // dependency wait (they never depend on the kernel before), the token rows after it; on a
  // plain launch both instructions do nothing. Groups in commit order: W 0..S-2, then X
  // 0..S-2, then one whole chunk a loop step, so the loop's wait<kStages - 2> still finds chunk
  // i complete (every group before X i is).
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < mine) load_w(i);
    cp_async_commit();
  }
  pdl::grid_dependency_wait();
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < mine) load_x(i);
    cp_async_commit();
  }
  // ldmatrix lanes: A's four 8x8 matrices are (rows 0-7 | 8-15) × (features 0-7 | 8-15) of a
  // 16-feature step; B's are 8 tokens × four 8-feature pieces (two steps).
  const int q = lane >> 3, a_row = (lane & 7) + ((q & 1) << 3), a_half = q >> 1;
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();  // every lane's copies of chunk i landed; slot (i - 1) % kStages is free
    if (i + kStages - 1 < mine) load_w(i + kStages - 1), load_x(i + kStages - 1);
    cp_async_commit();
    const __nv_bfloat16* ws = ring + (i % kStages) * S::kStageElems;
    const __nv_bfloat16* xs = ws + S::kWElems;
#pragma unroll
    for (int s = 0; s < kChunk / 16; s += 2) {
      uint32_t b[kNTiles][4];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        ldmatrix_x4(b[nt], xs + swizzled(nt * 8 + (lane & 7), 2 * s + q, kChunk));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int tile = 0; tile < kTiles; ++tile) {
          uint32_t a[4];
          ldmatrix_x4(a, ws + swizzled(tile * 16 + a_row, 2 * (s + h) + a_half, kChunk));
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
            mma_bf16(acc[tile][nt], a, b[nt][2 * h], b[nt][2 * h + 1]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  if (!lead) pdl::allow_dependents();  // after the loop, as the GEMVs' multi-wave grids
  __syncthreads();                     // every warp is done with its ring: the reduction reuses it
  float4* red = reinterpret_cast<float4*>(smem);  // [kWarps, kTiles · kNTiles, 32]
  constexpr int kFrags = kTiles * kNTiles;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const float(&c)[4] = acc[tile][nt];
      red[(warp * kFrags + tile * kNTiles + nt) * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
    }
  }
  __syncthreads();
  if (warp != 0) return;
  // Lane (g, c) holds rows g and g + 8 of each tile for tokens 2c and 2c + 1 of each 8.
  const int g = lane >> 2;
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    const int tile = f / kNTiles, t0 = (f % kNTiles) * 8 + 2 * (lane & 3);
    float4 v = red[f * 32 + lane];
#pragma unroll
    for (int wi = 1; wi < kWarps; ++wi) {
      const float4 o = red[(wi * kFrags + f) * 32 + lane];
      v.x += o.x;
      v.y += o.y;
      v.z += o.z;
      v.w += o.w;
    }
    const float vals[2][2] = {{v.x, v.y}, {v.z, v.w}};  // [row g | g + 8][token t0 | t0 + 1]
    if constexpr (kEpi == Epilogue::kStore) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = blockIdx.x * S::kRows + tile * 16 + g + 8 * h;
        if (row >= n) continue;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if (t0 + j >= m) continue;
          if constexpr (sizeof(Out) == 4) {
            y[int64_t(t0 + j) * ldy + row] = vals[h][j];
          } else {
            y[int64_t(t0 + j) * ldy + row] = __float2bfloat16(vals[h][j]);
          }
        }
      }
    } else {
      const int out = blockIdx.x * (S::kRows / 2) + tile * 8 + g;
      if (out >= n) continue;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (t0 + j >= m) continue;
        // Both values rounded to bf16 first, as launch_skinny_gemm would store them.
        const float lo = __bfloat162float(__float2bfloat16(vals[0][j]));
        const float hi = __bfloat162float(__float2bfloat16(vals[1][j]));
        if constexpr (kEpi == Epilogue::kRope) {
          const int half = rope.s.head_dim / 2;
          rope_store_pair(rope, t0 + j, out / half, out % half, lo, hi);
        } else {
          y[int64_t(t0 + j) * ldy + out] = __float2bfloat16(silu_times(lo, hi));
        }
      }
    }
  }
}

struct Variant {
  const char* name;
  int rows;     // weight rows per block
  int tokens;   // at most
  int threads;  // per block
  size_t smem;
  template <typename Out>
  using Kernel = void (*)(const __nv_bfloat16*, const __nv_bfloat16*, int32_t, int32_t, int32_t,
                          int32_t, Out*, RopeKvTarget, bool);
  Kernel<__nv_bfloat16> store_bf16;
  Kernel<float> store_f32;
  Kernel<__nv_bfloat16> swiglu;
  Kernel<__nv_bfloat16> rope;
};

template <int kChunk, int kStages, int kWarps, int kTiles, int kNTiles>
Variant make_variant(const char* name) {
  using S = Shape<kChunk, kStages, kWarps, kTiles, kNTiles>;
  constexpr auto store = Epilogue::kStore;
  return Variant{
      name,
      S::kRows,
      S::kTokens,
      kWarps * 32,
      S::kSmemBytes,
      skinny_kernel<kChunk, kStages, kWarps, kTiles, kNTiles, store, __nv_bfloat16>,
      skinny_kernel<kChunk, kStages, kWarps, kTiles, kNTiles, store, float>,
      skinny_kernel<kChunk, kStages, kWarps, kTiles, kNTiles, Epilogue::kSwiglu, __nv_bfloat16>,
      skinny_kernel<kChunk, kStages, kWarps, kTiles, kNTiles, Epilogue::kRope, __nv_bfloat16>};
}

// name: chunk features / ring stages / warps per block / 16-row tiles per block / 8-token
// tiles. Variant 0 serves up to 8 tokens: fastest or within 2% of it on every Qwen2.5-7B Linear
// at 3-8 tokens (H200 sweep, NOTES.md v15), e.g. gate|up 61.9-63.9 us against 70.2-70.9 for
// cuBLASLt and silu_mul, down 33.1-33.3 against 38.1-38.7. pick() chooses for 9-16 tokens; the
// others stay for bench_int4_gemv's sweep.
const Variant* variants() {
  static const Variant all[] = {
      make_variant<128, 3, 4, 1, 1>("c128-s3-w4-t1-n1"),
      make_variant<128, 3, 4, 1, 2>("c128-s3-w4-t1-n2"),
      make_variant<128, 4, 4, 1, 1>("c128-s4-w4-t1-n1"),
      make_variant<256, 3, 2, 1, 1>("c256-s3-w2-t1-n1"),
      make_variant<64, 8, 4, 1, 1>("c64-s8-w4-t1-n1"),
      make_variant<128, 4, 4, 2, 1>("c128-s4-w4-t2-n1"),
      make_variant<128, 2, 4, 1, 2>("c128-s2-w4-t1-n2"),
      make_variant<128, 3, 4, 2, 2>("c128-s3-w4-t2-n2"),
      make_variant<256, 2, 2, 1, 2>("c256-s2-w2-t1-n2"),
      make_variant<64, 6, 4, 1, 2>("c64-s6-w4-t1-n2"),
      // 17-32 tokens: x grows to [32, chunk] a stage, as large as the weights' [16, chunk].
      // Swept on the H200 (NOTES.md v16) against c128-s2 forms with one and two row tiles, which
      // lost on every 7B Linear and were dropped.
      make_variant<64, 4, 4, 1, 4>("c64-s4-w4-t1-n4"),
      make_variant<64, 3, 4, 2, 4>("c64-s3-w4-t2-n4"),
  };
  return all;
}
constexpr int32_t kVariants = 12;

// 9-16 tokens (NOTES.md v15): c128-s2-w4-t1-n2 on gate|up (66.8-68.5 us against 75.2 for
// cuBLASLt and silu_mul; its 64 KB a block let 3 blocks share an SM), c128-s3-w4-t1-n2 elsewhere
// (down 34.0-35.1 against 39.2-39.5, o 8.2-8.4 against 11.5). 17-32 tokens (NOTES.md v16):
// c64-s4-w4-t1-n4 (o 9.2-9.3 us against 11.6-11.8, down 36.7-37.9 against 38.3-39.1); the
// SwiGLU form there only for a caller that asks (the runner keeps cuBLASLt: 73.0 us with silu_mul
// at 24 rows against 76.2-79.0 for c64-s3-w4-t2-n4, the fastest skinny form).
int32_t pick(int32_t m, bool swiglu) {
  if (m <= 8) return 0;
  if (m <= 16) return swiglu ? 6 : 1;
  return swiglu ? 11 : 10;
}

// Above 48 KB of dynamic shared memory a kernel must opt in, per device. Verify passes and
// prefill chunks are not graph-captured, so each skinny launch would repeat the driver call:
// it runs once per kernel and device instead.
void opt_in_smem(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device)
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mu);
  if (!done.insert({kernel, device}).second) return;
  TANDEM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <typename Out>
void launch(Variant::Kernel<Out> kernel, const Variant& v, int32_t blocks, cudaStream_t stream,
            bool pdl, const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n,
            int32_t k, int32_t ldy, Out* y, const RopeKvTarget& rope = {}) {
  opt_in_smem(reinterpret_cast<const void*>(kernel), v.smem);
  // An overlapped grid resident all at once lets its successor launch at its start (the
  // kernel's `lead`). H100, x2 alternated, device span (NOTES.md v48): 0.5B 3-token step
  // 0.747 -> 0.687 ms, batch 4 0.724 -> 0.678, 8B 5-token 5.419 -> 5.380; the 7B 5-token step
  // 5.068 -> 5.073 and batch 4 4.894 -> 4.921 lost a little (leaving q|k|v+RoPE's trigger after
  // its loop: 5.093 and 4.906); the spec pair at batch 4 1.69 -> 1.75x adaptive.
  // TANDEM_SKINNY_LEAD=0 keeps every grid's trigger after its loop.
  static const bool lead_allowed = env_choice("TANDEM_SKINNY_LEAD", {0, 1}, 1) == 1;
  const bool lead = pdl && lead_allowed && fits_one_wave(kernel, blocks, v.threads, v.smem);
  pdl::launch(pdl, kernel, blocks, v.threads, v.smem, stream, x, w, m, n, k, ldy, y, rope, lead);
}

const Variant& checked(int32_t variant, int32_t m, int32_t k, bool swiglu, const char* what) {
  if (variant < 0) variant = pick(m, swiglu);
  if (m < 1 || m > kSkinnyMaxTokens || k % 8 != 0 || variant >= kVariants ||
      m > variants()[variant].tokens) {
    std::fprintf(stderr, "%s: unsupported m=%d k=%d variant=%d\n", what, m, k, variant);
    std::abort();
  }
  return variants()[variant];
}

}  // namespace

int32_t skinny_variants() {
  return kVariants;
}

const char* skinny_variant_name(int32_t variant) {
  return variant >= 0 && variant < kVariants ? variants()[variant].name : "?";
}

bool skinny_swiglu_wins(int32_t m) {
  // Not at 17-32 rows: the 0.5B's gate|up there (batch 24, 32) took 1.02 / 1.06 ms a step against
  // 0.94 / 0.98 with cuBLASLt and silu_mul (H100, NOTES.md v62).
  return m >= 1 && m <= 16;
}

bool skinny_gemm_wins(int32_t m, int32_t n, int32_t /*k*/) {
  if (m < 1 || m > kSkinnyMaxTokens) return false;
  if (m <= 8) return true;
  // Above 8 tokens pick()'s variants fit two blocks an SM (64-96 KB each): past one wave their
  // tail loses to cuBLASLt (7B q|k|v, 288 blocks on 132 SMs: 13.7-14.2 us against 10.8 at 9-16
  // tokens, 16.3-17.1 against 10.8 at 17-32).
  return (n + 15) / 16 <= 2 * multiprocessors();
}

int32_t skinny_variant_tokens(int32_t variant) {
  return variant >= 0 && variant < kVariants ? variants()[variant].tokens : 0;
}

void launch_skinny_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n,
                        int32_t k, void* y, bool out_f32, cudaStream_t stream, int32_t ldy,
                        int32_t variant, bool pdl) {
  const Variant& v = checked(variant, m, k, false, "skinny_gemm");
  if (ldy <= 0) ldy = n;
  const int32_t blocks = (n + v.rows - 1) / v.rows;
  if (out_f32) {
    launch(v.store_f32, v, blocks, stream, pdl, x, w, m, n, k, ldy, static_cast<float*>(y));
  } else {
    launch(v.store_bf16, v, blocks, stream, pdl, x, w, m, n, k, ldy,
           static_cast<__nv_bfloat16*>(y));
  }
}

void launch_skinny_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t width,
                          int32_t k, __nv_bfloat16* out, cudaStream_t stream, int32_t variant,
                          bool pdl) {
  const Variant& v = checked(variant, m, k, true, "skinny_swiglu");
  const int32_t blocks = (width + v.rows / 2 - 1) / (v.rows / 2);
  launch(v.swiglu, v, blocks, stream, pdl, x, w, m, width, k, width, out);
}

bool skinny_qkv_rope_fuses(int32_t m, int32_t k, const RopeKvShape& s) {
  const int64_t rows = int64_t(s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
  return s.num_tokens == m && s.head_dim % 2 == 0 && k % 8 == 0 && m >= kSkinnyMinTokens &&
         m <= kSkinnyMaxTokens && skinny_gemm_wins(m, int32_t(rows), k);
}

void launch_skinny_qkv_rope(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t k,
                            const RopeKvTarget& out, cudaStream_t stream, int32_t variant,
                            bool pdl) {
  const Variant& v = checked(variant, m, k, false, "skinny_qkv_rope");
  if (out.s.num_tokens != m || out.s.head_dim % 2 != 0) {
    std::fprintf(stderr, "skinny_qkv_rope: %d tokens against the target's %d, head size %d\n", m,
                 out.s.num_tokens, out.s.head_dim);
    std::abort();
  }
  const int32_t pairs = (out.s.num_heads + 2 * out.s.num_kv_heads) * (out.s.head_dim / 2);
  const int32_t blocks = (pairs + v.rows / 2 - 1) / (v.rows / 2);
  launch<__nv_bfloat16>(v.rope, v, blocks, stream, pdl, x, w, m, pairs, k, 0, nullptr, out);
}

}  // namespace tandem::kernels
