// Fp8GemmContext: W8A8 prefill through cuBLASLt's FP8 E4M3 path, the transposed trick of
// gemm.cu (row-major y[m, ldy] is column-major D[n, m] = W[n, k] (A, op T) × x^T (B, op N)).
// Three scaling modes, one per weight shape, chosen in prepare():
//   outer vectors:  A_SCALE_MODE = B_SCALE_MODE = OUTER_VEC_32F, w.scale [n] on the rows of D and
//                   x_scale [m] on its columns; cuBLASLt applies both in its epilogue.
//   unit scales:    the fallback for channel scales when no OUTER_VEC algorithm exists: an
//                   unscaled FP8 GEMM into an fp32 scratch, then fp8_gemm_epilogue_kernel
//                   multiplies by x_scale[t] × w.scale[r] and converts.
//   128 × 128:      A_SCALE_MODE = BLK128x128_32F, B_SCALE_MODE = VEC128_32F. Scale layouts as
//                   PyTorch's _scaled_mm hands them to cuBLASLt (ScaledBlas.cpp,
//                   is_blockwise_{1x128,128x128}_scaling): the weight's [ceil(n/128), L4] with
//                   the k blocks contiguous and L4 = ceil(k/128) rounded up to 4 (the checkpoint's
//                   row-major order when ceil(k/128) % 4 == 0, padded in scratch otherwise); the
//                   activations' [ceil(k/128), m] with the tokens contiguous, the transpose of
//                   launch_fp8_quantize's x_scale [m, ceil(k/128)], made in scratch per call.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#include "cublas_check.cuh"
#include "cublaslt_layouts.cuh"
#include "cuda_check.cuh"
#include "fp8_linear.cuh"
#include "gemm.cuh"

namespace tandem::kernels {
namespace {

enum class Mode { kOuterVector, kUnitScales, kBlock };

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kOuterVector:
      return "outer-vector scales (OUTER_VEC_32F)";
    case Mode::kUnitScales:
      return "unit scales + epilogue (fp32 scratch)";
    case Mode::kBlock:
      return "block scales (BLK128x128_32F x VEC128_32F)";
  }
  return "?";
}

// Rows of the unit-scales scratch per GEMM call: m is cut into tiles so the fp32 scratch stays
// bounded (a 2048-token chunk of a stacked gate|up would need 310 MB at once).
constexpr size_t kUnitScratchBytes = 64u << 20;

int32_t ceil_div(int32_t a, int32_t b) {
  return (a + b - 1) / b;
}
// Block-scaled GEMMs run on row counts that are multiples of this (cuBLASLt 13 on Hopper has
// no algorithm for m = 37; measured on the H200).
constexpr int32_t kBlockRows = 16;

int32_t block_ld(int32_t k) {
  return (ceil_div(k, kFp8Block) + 3) / 4 * 4;
}

// y[t, r] = acc[t, r] × (x_scale[t] × w_scale[r]), acc [m, n] fp32 (D of the unit-scales GEMM).
template <typename Out>
__global__ void fp8_gemm_epilogue_kernel(const float* __restrict__ acc, int32_t m, int32_t n,
                                         const float* __restrict__ x_scale,
                                         const float* __restrict__ w_scale, Out* __restrict__ y,
                                         int32_t ldy) {
  const int64_t total = int64_t(m) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int t = int(i / n), r = int(i % n);
    const float v = acc[i] * (x_scale[t] * w_scale[r]);
    if constexpr (sizeof(Out) == 4) {
      y[int64_t(t) * ldy + r] = v;
    } else {
      y[int64_t(t) * ldy + r] = __float2bfloat16_rn(v);
    }
  }
}

// Block mode's scale tensors as cuBLASLt reads them (file comment): xs_t[g, t] = x_scale[t, g]
// for t < m, 0 for the padding tokens m <= t < m_pad; and, when ceil(k/128) % 4 != 0,
// ws_pad[b, g] = w_scale[b, g] with rows of `ld` (zeros after).
__global__ void fp8_block_scales_kernel(const float* __restrict__ x_scale, int32_t m, int32_t m_pad,
                                        int32_t groups, float* __restrict__ xs_t,
                                        const float* __restrict__ w_scale, int32_t block_rows,
                                        int32_t ld, float* __restrict__ ws_pad) {
  const int64_t nx = int64_t(m_pad) * groups;
  const int64_t nw = ws_pad ? int64_t(block_rows) * ld : 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nx + nw;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < nx) {
      const int64_t g = i / m_pad, t = i % m_pad;
      xs_t[i] = t < m ? x_scale[t * groups + g] : 0.0f;
    } else {
      const int64_t j = i - nx, b = j / ld, g = j % ld;
      ws_pad[j] = g < groups ? w_scale[b * groups + g] : 0.0f;
    }
  }
}

int grid_for(int64_t items, int threads) {
  return int(std::min<int64_t>((items + threads - 1) / threads, 132 * 8));
}

}  // namespace

struct Fp8GemmContext::Impl {
  using Layouts = LtLayouts;
  using Plan = LtPlan;
  // m, n, k, mode, fp32 output, ld of D
  using Key = std::tuple<int32_t, int32_t, int32_t, Mode, bool, int32_t>;
  using ShapeKey = std::tuple<int32_t, int32_t, bool, bool>;  // n, k, block, fp32 output

  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, Plan> plans;                                   // exact shapes
  std::map<Key, std::pair<bool, cublasLtMatmulAlgo_t>> algos;  // per row bucket; false: none
  std::map<ShapeKey, Mode> modes;                              // chosen in prepare()
  std::map<ShapeKey, int32_t> prepared_m;
  bool prefer_unit_scales = false;

  // Scratch, sized by prepare() so run() allocates nothing (CUDA-graph capture).
  float* unit_acc = nullptr;  // [rows, n] fp32, unit-scales mode
  size_t unit_acc_floats = 0;
  float* xs_t = nullptr;  // [ceil(k/128), m] block mode
  size_t xs_t_floats = 0;
  float* ws_pad = nullptr;  // [ceil(n/128), block_ld(k)] block mode, when ceil(k/128) % 4 != 0
  size_t ws_pad_floats = 0;
  // Block mode's last m % 16 tokens run as 16 (cuBLASLt has no block-scaled kernel for other
  // row counts): their scales [ceil(k/128), 16] and output [16, n] (fp32 or bf16).
  float* tail_xs = nullptr;
  size_t tail_xs_floats = 0;
  float* tail_out = nullptr;
  size_t tail_out_floats = 0;

  static void grow(float*& p, size_t& have, size_t want) {
    if (want <= have) return;
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());  // an earlier run may still read the old one
    cudaFree(p);
    TANDEM_CUDA_CHECK(cudaMalloc(&p, want * sizeof(float)));
    have = want;
  }

  static int32_t unit_rows(int32_t max_m, int32_t n) {
    const size_t rows = kUnitScratchBytes / (size_t(n) * sizeof(float));
    return int32_t(std::clamp<size_t>(rows, 16, size_t(std::max(max_m, 1))));
  }

  Layouts make_layouts(int32_t m, int32_t n, int32_t k, Mode mode, bool out_f32,
                       int32_t ldd) const {
    // The unit-scales GEMM always writes fp32 (the epilogue converts).
    const bool d_f32 = out_f32 || mode == Mode::kUnitScales;
    Layouts l = tn_layouts(m, n, k, CUDA_R_8F_E4M3, d_f32 ? CUDA_R_32F : CUDA_R_16BF, ldd);
    if (mode != Mode::kUnitScales) {
      const int32_t a_mode = mode == Mode::kBlock ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      const int32_t b_mode = mode == Mode::kBlock ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                         &a_mode, sizeof(a_mode)));
      TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                         &b_mode, sizeof(b_mode)));
      // Some cuBLASLt versions want the pointers present when the mode is checked; run() sets
      // the real ones.
      set_scales(l.op, workspace, workspace);
    }
    return l;
  }

  static void set_scales(cublasLtMatmulDesc_t op, const void* a_scale, const void* b_scale) {
    TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                       &a_scale, sizeof(a_scale)));
    TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                       &b_scale, sizeof(b_scale)));
  }

  // The heuristic's first algorithm for a row bucket (ld of D = n), or nullptr when cuBLASLt has
  // none for this mode; the answer is cached either way.
  const cublasLtMatmulAlgo_t* searched(int32_t m, int32_t n, int32_t k, Mode mode, bool out_f32) {
    const Key key{m, n, k, mode, out_f32, n};
    auto it = algos.find(key);
    if (it != algos.end()) return it->second.first ? &it->second.second : nullptr;
    Layouts l = make_layouts(m, n, k, mode, out_f32, n);
    cublasLtMatmulPreference_t pref;
    TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    // NOT_SUPPORTED (not a failure): this cuBLASLt or device has no kernel for the mode.
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, l.op, l.a, l.b, l.c, l.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    destroy_layouts(l);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    auto& entry = algos[key];
    entry = {ok, result.algo};
    return ok ? &entry.second : nullptr;
  }

  // Every bucket up to max_m has an algorithm in this mode.
  bool searchable(int32_t max_m, int32_t n, int32_t k, Mode mode, bool out_f32) {
    for (int32_t m = 1; m <= max_m; m = GemmContext::bucket(m) + 1) {
      if (searched(GemmContext::bucket(m), n, k, mode, out_f32) == nullptr) return false;
    }
    return true;
  }

  Plan& plan(int32_t m, int32_t n, int32_t k, Mode mode, bool out_f32, int32_t ldd) {
    const Key key{m, n, k, mode, out_f32, ldd};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p;
    p.l = make_layouts(m, n, k, mode, out_f32, ldd);
    const cublasLtMatmulAlgo_t* algo = searched(GemmContext::bucket(m), n, k, mode, out_f32);
    cublasLtMatmulHeuristicResult_t check{};
    if (algo == nullptr ||
        cublasLtMatmulAlgoCheck(handle, p.l.op, p.l.a, p.l.b, p.l.c, p.l.c, algo, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > workspace_bytes) {
      algo = searched(m, n, k, mode, out_f32);  // the bucket's algorithm does not fit this m
      if (algo == nullptr) {
        std::fprintf(stderr, "Fp8GemmContext: no cuBLASLt algorithm for m=%d n=%d k=%d in %s\n", m,
                     n, k, mode_name(mode));
        std::abort();
      }
      // A search at this exact m uses ld n; recheck against the caller's ld.
      if (cublasLtMatmulAlgoCheck(handle, p.l.op, p.l.a, p.l.b, p.l.c, p.l.c, algo, &check) !=
          CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "Fp8GemmContext: cuBLASLt refuses ld=%d for m=%d n=%d k=%d\n", ldd, m,
                     n, k);
        std::abort();
      }
    }
    p.algo = *algo;
    return plans.emplace(key, p).first->second;
  }

  void matmul(const Plan& p, const void* w, const void* x, void* d, cudaStream_t stream) {
    const float alpha = 1.0f, beta = 0.0f;
    TANDEM_CUBLAS_CHECK(cublasLtMatmul(handle, p.l.op, &alpha, w, p.l.a, x, p.l.b, &beta, d, p.l.c,
                                       d, p.l.c, &p.algo, workspace, workspace_bytes, stream));
  }
};

Fp8GemmContext::Fp8GemmContext(size_t workspace_bytes)
    : impl_(new Impl), workspace_bytes_(workspace_bytes) {
  TANDEM_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  TANDEM_CUDA_CHECK(cudaMalloc(&impl_->workspace, workspace_bytes_));
  impl_->workspace_bytes = workspace_bytes_;
}

Fp8GemmContext::~Fp8GemmContext() {
  for (auto& [key, p] : impl_->plans) destroy_layouts(p.l);
  cudaFree(impl_->unit_acc);
  cudaFree(impl_->xs_t);
  cudaFree(impl_->ws_pad);
  cudaFree(impl_->tail_xs);
  cudaFree(impl_->tail_out);
  cudaFree(impl_->workspace);
  cublasLtDestroy(impl_->handle);
  delete impl_;
}

bool Fp8GemmContext::supports(int32_t n, int32_t k, bool block, bool out_f32) {
  if (n <= 0 || k <= 0 || k % 16 != 0) return false;
  if (block && k % kFp8Block != 0) return false;
  // A few row counts across the range prompts are chunked into; prepare() searches them all.
  for (int32_t m : {16, 256, 2048}) {
    if (block) {
      if (impl_->searched(m, n, k, Mode::kBlock, out_f32) == nullptr) return false;
    } else if (impl_->searched(m, n, k, Mode::kOuterVector, out_f32) == nullptr &&
               impl_->searched(m, n, k, Mode::kUnitScales, true) == nullptr) {
      return false;
    }
  }
  return true;
}

void Fp8GemmContext::prepare(int32_t max_m, int32_t n, int32_t k, bool block, bool out_f32) {
  Impl& s = *impl_;
  Mode mode = Mode::kBlock;
  if (!block) {
    mode = !s.prefer_unit_scales && s.searchable(max_m, n, k, Mode::kOuterVector, out_f32)
               ? Mode::kOuterVector
               : Mode::kUnitScales;
  }
  if (mode != Mode::kOuterVector && !s.searchable(max_m, n, k, mode, true)) {
    std::fprintf(stderr, "Fp8GemmContext: no cuBLASLt algorithm for n=%d k=%d in %s\n", n, k,
                 mode_name(mode));
    std::abort();
  }
  const Impl::ShapeKey shape{n, k, block, out_f32};
  s.modes[shape] = mode;
  s.prepared_m[shape] = std::max(s.prepared_m[shape], max_m);
  if (mode == Mode::kUnitScales) {
    Impl::grow(s.unit_acc, s.unit_acc_floats, size_t(Impl::unit_rows(max_m, n)) * n);
  } else if (mode == Mode::kBlock) {
    Impl::grow(s.xs_t, s.xs_t_floats, size_t(ceil_div(k, kFp8Block)) * max_m);
    Impl::grow(s.tail_xs, s.tail_xs_floats, size_t(ceil_div(k, kFp8Block)) * kBlockRows);
    Impl::grow(s.tail_out, s.tail_out_floats, size_t(kBlockRows) * n);
    if (ceil_div(k, kFp8Block) % 4 != 0) {
      Impl::grow(s.ws_pad, s.ws_pad_floats, size_t(ceil_div(n, kFp8Block)) * block_ld(k));
    }
  }
}

void Fp8GemmContext::prefer_unit_scales(bool on) {
  impl_->prefer_unit_scales = on;
}

const char* Fp8GemmContext::mode(int32_t n, int32_t k, bool block, bool out_f32) const {
  auto it = impl_->modes.find(Impl::ShapeKey{n, k, block, out_f32});
  return it == impl_->modes.end() ? "unprepared" : mode_name(it->second);
}

void Fp8GemmContext::run(const uint8_t* xq, const float* x_scale, const Fp8Matrix& w, int32_t m,
                         void* y, int32_t ldy, bool out_f32, cudaStream_t stream) {
  if (m == 0) return;
  Impl& s = *impl_;
  const Impl::ShapeKey shape{w.n, w.k, w.block, out_f32};
  auto it = s.modes.find(shape);
  if (it == s.modes.end() || m > s.prepared_m[shape]) {
    std::fprintf(stderr, "Fp8GemmContext::run: m=%d n=%d k=%d block=%d not prepared\n", m, w.n, w.k,
                 int(w.block));
    std::abort();
  }
  switch (it->second) {
    case Mode::kOuterVector: {
      Impl::Plan& p = s.plan(m, w.n, w.k, Mode::kOuterVector, out_f32, ldy);
      Impl::set_scales(p.l.op, w.scale, x_scale);
      s.matmul(p, w.weight, xq, y, stream);
      return;
    }
    case Mode::kBlock: {
      // Whole 16-row blocks straight into y; the rest as one padded 16-row GEMM into tail_out
      // (reading xq rows up to the next multiple of 16: the caller's buffer has them; their
      // scales are 0), of which the real rows are copied out.
      const int32_t groups = ceil_div(w.k, kFp8Block);
      float* ws_pad = groups % 4 != 0 ? s.ws_pad : nullptr;
      const float* ws = ws_pad ? ws_pad : w.scale;
      const int32_t main_m = m / kBlockRows * kBlockRows, tail = m - main_m;
      const int32_t ws_rows = ceil_div(w.n, kFp8Block);
      auto scales = [&](const float* xs, int32_t rows, int32_t rows_pad, float* xs_t,
                        bool weights) {
        float* wp = weights ? ws_pad : nullptr;
        const int64_t items =
            int64_t(rows_pad) * groups + (wp ? int64_t(ws_rows) * block_ld(w.k) : 0);
        fp8_block_scales_kernel<<<grid_for(items, 256), 256, 0, stream>>>(
            xs, rows, rows_pad, groups, xs_t, w.scale, ws_rows, block_ld(w.k), wp);
        TANDEM_CUDA_CHECK_LAUNCH();
      };
      if (main_m > 0) {
        scales(x_scale, main_m, main_m, s.xs_t, true);
        Impl::Plan& p = s.plan(main_m, w.n, w.k, Mode::kBlock, out_f32, ldy);
        Impl::set_scales(p.l.op, ws, s.xs_t);
        s.matmul(p, w.weight, xq, y, stream);
      }
      if (tail > 0) {
        scales(x_scale + int64_t(main_m) * groups, tail, kBlockRows, s.tail_xs, main_m == 0);
        Impl::Plan& p = s.plan(kBlockRows, w.n, w.k, Mode::kBlock, out_f32, w.n);
        Impl::set_scales(p.l.op, ws, s.tail_xs);
        s.matmul(p, w.weight, xq + int64_t(main_m) * w.k, s.tail_out, stream);
        const size_t esize = out_f32 ? 4 : 2;
        TANDEM_CUDA_CHECK(
            cudaMemcpy2DAsync(static_cast<std::byte*>(y) + int64_t(main_m) * ldy * esize,
                              size_t(ldy) * esize, s.tail_out, size_t(w.n) * esize,
                              size_t(w.n) * esize, size_t(tail), cudaMemcpyDeviceToDevice, stream));
      }
      return;
    }
    case Mode::kUnitScales: {
      const int32_t rows = Impl::unit_rows(s.prepared_m[shape], w.n);
      for (int32_t m0 = 0; m0 < m; m0 += rows) {
        const int32_t mt = std::min(rows, m - m0);
        Impl::Plan& p = s.plan(mt, w.n, w.k, Mode::kUnitScales, true, w.n);
        s.matmul(p, w.weight, xq + int64_t(m0) * w.k, s.unit_acc, stream);
        const int grid = grid_for(int64_t(mt) * w.n, 256);
        if (out_f32) {
          fp8_gemm_epilogue_kernel<float>
              <<<grid, 256, 0, stream>>>(s.unit_acc, mt, w.n, x_scale + m0, w.scale,
                                         static_cast<float*>(y) + int64_t(m0) * ldy, ldy);
        } else {
          fp8_gemm_epilogue_kernel<__nv_bfloat16>
              <<<grid, 256, 0, stream>>>(s.unit_acc, mt, w.n, x_scale + m0, w.scale,
                                         static_cast<__nv_bfloat16*>(y) + int64_t(m0) * ldy, ldy);
        }
        TANDEM_CUDA_CHECK_LAUNCH();
      }
      return;
    }
  }
}

}  // namespace tandem::kernels
