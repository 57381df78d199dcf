// AWQ and GPTQ repacked into Int4Layout: the checkpoint is first unpacked into a plain matrix
// (q[n, k] in packed feature order, zeros and scales [n, groups]), which is then cut into the
// 16-row tiles kernels/int4_linear.cuh describes. stack() goes through the same plain form when
// the upper matrix ends inside a tile.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/parallel_ranges.h"
#include "model/dequant.h"
#include "model/device_quant_layout.h"

namespace tandem {

namespace {

constexpr int64_t kTileRows = 16;

// AutoAWQ's WQLinear_GEMM: nibble j of an int32 holds output feature 8c + kAwqOrder[j]
// (dequant.cc has the inverse).
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

int64_t tiles_of(int64_t n) {
  return (n + kTileRows - 1) / kTileRows;
}

struct PlainInt4 {
  int64_t n = 0, k = 0, group_size = 0;
  std::vector<uint8_t> q;        // [n, k] 0..15, packed feature order
  std::vector<uint8_t> zeros;    // [n, groups]
  std::vector<uint16_t> scales;  // [n, groups] fp16 bits
  int64_t groups() const { return k / group_size; }
};

// Word of tile `tile`, block `b`, lane `lane`, k-step `s` in Int4Layout::qweight.
int64_t word_index(int64_t k, int64_t tile, int64_t b, int64_t lane, int64_t s) {
  const int64_t pairs = k / 64;
  const int64_t base = tile * 2 * k;
  if (b / 2 < pairs) return base + (b / 2) * 128 + lane * 4 + (b % 2) * 2 + s;
  return base + pairs * 128 + lane * 2 + s;
}

// Where q[r, i] is: word and bit shift.
std::pair<int64_t, int> nibble_at(int64_t k, int64_t r, int64_t i) {
  const int64_t j = r % 8, h = (r % 16) / 8;
  const int64_t f = i % 32, s = f / 16, kk = f % 16;
  const int64_t lane = j * 4 + (kk % 8) / 2;
  const int64_t m = h + 2 * (kk / 8), e = kk % 2;
  return {word_index(k, r / kTileRows, i / 32, lane, s), int(4 * (m + 4 * e))};
}

int64_t group_index(int64_t groups, int64_t r, int64_t g) {
  return ((r / kTileRows) * groups + g) * kTileRows + (r % 8) * 2 + (r % 16) / 8;
}

// Tile `tile`'s words of Int4Layout::qweight.
void tile_words(const PlainInt4& p, int64_t tile, std::vector<uint32_t>& out) {
  const int64_t k = p.k;
  for (int64_t b = 0; b < k / 32; ++b) {
    for (int64_t lane = 0; lane < 32; ++lane) {
      const int64_t r0 = tile * kTileRows + lane / 4;
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t f0 = b * 32 + s * 16 + 2 * (lane % 4);
        uint32_t word = 0;
        for (int m = 0; m < 4; ++m) {
          const int64_t r = r0 + 8 * (m % 2);
          if (r >= p.n) continue;
          const uint8_t* row = p.q.data() + r * k + f0 + 8 * (m / 2);
          word |= uint32_t(row[0]) << (4 * m);
          word |= uint32_t(row[1]) << (4 * (m + 4));
        }
        out[size_t(word_index(k, tile, b, lane, s))] = word;
      }
    }
  }
}

// Repacking walks every nibble of a Linear twice (unpack, tiling), so both loops spread over the
// cores (parallel_ranges): the AWQ Qwen2.5-7B's largest Linear took 0.55 s on one core, ~31 s a
// model load before (NOTES.md v19).
std::vector<uint32_t> tile_qweight(const PlainInt4& p) {
  const int64_t tiles = tiles_of(p.n);
  std::vector<uint32_t> out(size_t(tiles * 2 * p.k), 0);
  parallel_ranges(tiles, 8, [&](int64_t first, int64_t last) {
    for (int64_t tile = first; tile < last; ++tile) tile_words(p, tile, out);
  });
  return out;
}

Int4Layout to_layout(const PlainInt4& p, std::vector<int32_t> perm) {
  Int4Layout w;
  w.n = p.n;
  w.k = p.k;
  w.group_size = p.group_size;
  w.qweight = tile_qweight(p);
  const int64_t groups = p.groups();
  const size_t group_entries = size_t(tiles_of(p.n) * groups * kTileRows);
  w.scales.assign(group_entries, 0);
  w.zeros.assign(group_entries, 0);
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t at = size_t(group_index(groups, r, g));
      w.scales[at] = p.scales[size_t(r * groups + g)];
      w.zeros[at] = p.zeros[size_t(r * groups + g)];
    }
  }
  w.perm = std::move(perm);
  return w;
}

PlainInt4 to_plain(const Int4Layout& w) {
  PlainInt4 p;
  p.n = w.n;
  p.k = w.k;
  p.group_size = w.group_size;
  const int64_t groups = p.groups();
  p.q.resize(size_t(w.n * w.k));
  p.zeros.resize(size_t(w.n * groups));
  p.scales.resize(size_t(w.n * groups));
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t i = 0; i < w.k; ++i) {
      const auto [word, shift] = nibble_at(w.k, r, i);
      p.q[size_t(r * w.k + i)] = uint8_t((w.qweight[size_t(word)] >> shift) & 15u);
    }
    for (int64_t g = 0; g < groups; ++g) {
      const size_t at = size_t(group_index(groups, r, g));
      p.zeros[size_t(r * groups + g)] = w.zeros[at];
      p.scales[size_t(r * groups + g)] = w.scales[at];
    }
  }
  return p;
}

Error unsupported(const std::string& module, const std::string& what) {
  return make_error(ErrorCode::kUnsupported, module + ": " + what);
}

// scales [groups, n] (F16, or BF16 when every value is exact in fp16) → [n, groups] fp16 bits.
Status read_scales(const TensorView& t, int64_t groups, int64_t n, const std::string& module,
                   std::vector<uint16_t>& out) {
  out.resize(size_t(n * groups));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < n; ++o) {
      const float v = float_element(t, g * n + o);
      const uint16_t bits = f32_to_f16(v);
      if (f16_to_f32(bits) != v) {
        return unsupported(module, "scales [" + std::to_string(g) + ", " + std::to_string(o) +
                                       "] = " + std::to_string(v) + " (" +
                                       std::string(dtype_name(t.dtype)) +
                                       ") is not exact in fp16, which the int4 kernels read");
      }
      out[size_t(o * groups + g)] = bits;
    }
  }
  return Status::Ok();
}

// GPTQ act-order: features sorted by group, stable. Every group must then be one run of
// group_size features, the kernels' uniform groups.
Result<std::vector<int32_t>> act_order_perm(const TensorView& g_idx, int64_t k, int64_t groups,
                                            int64_t group_size, const std::string& module) {
  std::vector<int32_t> group_of(static_cast<size_t>(k));
  std::vector<int64_t> count(size_t(groups), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t g = int32_t(load_u32(g_idx.data, i));
    if (g < 0 || g >= groups) {
      return unsupported(module, "g_idx[" + std::to_string(i) + "] = " + std::to_string(g) +
                                     " is outside [0, " + std::to_string(groups) + ")");
    }
    group_of[size_t(i)] = g;
    ++count[size_t(g)];
  }
  for (int64_t g = 0; g < groups; ++g) {
    if (count[size_t(g)] != group_size) {
      return unsupported(module, "g_idx puts " + std::to_string(count[size_t(g)]) +
                                     " input features in group " + std::to_string(g) +
                                     "; the int4 kernels need every group to hold group_size = " +
                                     std::to_string(group_size));
    }
  }
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int32_t a, int32_t b) { return group_of[size_t(a)] < group_of[size_t(b)]; });
  bool identity = true;
  for (int64_t i = 0; i < k; ++i) identity = identity && perm[size_t(i)] == i;
  if (identity) perm.clear();
  return perm;
}

}  // namespace

bool Int4Layout::can_stack(const Int4Layout& below) const {
  return k == below.k && group_size == below.group_size && perm == below.perm;
}

void Int4Layout::stack(const Int4Layout& below) {
  TANDEM_CHECK(can_stack(below), "stacking int4 matrices of different k, group size or perm");
  if (n % kTileRows == 0) {  // whole tiles: the arrays concatenate
    qweight.insert(qweight.end(), below.qweight.begin(), below.qweight.end());
    scales.insert(scales.end(), below.scales.begin(), below.scales.end());
    zeros.insert(zeros.end(), below.zeros.begin(), below.zeros.end());
    n += below.n;
    return;
  }
  PlainInt4 top = to_plain(*this);
  const PlainInt4 bottom = to_plain(below);
  top.n += bottom.n;
  top.q.insert(top.q.end(), bottom.q.begin(), bottom.q.end());
  top.zeros.insert(top.zeros.end(), bottom.zeros.begin(), bottom.zeros.end());
  top.scales.insert(top.scales.end(), bottom.scales.begin(), bottom.scales.end());
  *this = to_layout(top, std::move(perm));
}

Result<Int4Layout> repack_int4(const TensorView& qweight, const LinearQuant& q,
                               const std::string& module) {
  TANDEM_CHECK(q.format == QuantFormat::kAwq || q.format == QuantFormat::kGptq,
               "repack_int4 on %s, which is not AWQ or GPTQ", module.c_str());
  const int64_t n = q.out_features, k = q.in_features;
  if (k % 32 != 0) {
    return unsupported(module, "in_features = " + std::to_string(k) +
                                   " is not a multiple of 32, the int4 kernels' block");
  }
  const int64_t group_size = q.group_size == -1 ? k : q.group_size;
  if (group_size <= 0 || group_size % 32 != 0 || k % group_size != 0) {
    return unsupported(module, "quantization_config.group_size = " + std::to_string(q.group_size) +
                                   " is not a multiple of 32 dividing in_features = " +
                                   std::to_string(k) + ", which the int4 kernels need");
  }
  PlainInt4 p;
  p.n = n;
  p.k = k;
  p.group_size = group_size;
  const int64_t groups = k / group_size;
  const int64_t packed_n = n / 8;
  TANDEM_TRY(read_scales(*q.scale, groups, n, module, p.scales));
  p.zeros.resize(size_t(n * groups));
  p.q.resize(size_t(n * k));
  std::vector<int32_t> perm;
  if (q.format == QuantFormat::kAwq) {
    // qweight [k, n / 8] and qzeros [groups, n / 8], both in AutoAWQ's nibble order. Blocks of
    // 16 packed columns (one 64-byte line of a qweight row) with k inner: each thread writes its
    // 128 output rows front to back.
    constexpr int64_t kCols = 16;
    parallel_ranges((packed_n + kCols - 1) / kCols, 1, [&](int64_t first, int64_t last) {
      for (int64_t c0 = first * kCols; c0 < std::min(last * kCols, packed_n); c0 += kCols) {
        const int64_t c1 = std::min(c0 + kCols, packed_n);
        for (int64_t i = 0; i < k; ++i) {
          for (int64_t c = c0; c < c1; ++c) {
            const uint32_t word = load_u32(qweight.data, i * packed_n + c);
            for (int j = 0; j < 8; ++j)
              p.q[size_t((c * 8 + kAwqOrder[j]) * k + i)] = uint8_t((word >> (4 * j)) & 15u);
          }
        }
      }
    });
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t c = 0; c < packed_n; ++c) {
        const uint32_t word = load_u32(q.zeros->data, g * packed_n + c);
        for (int j = 0; j < 8; ++j)
          p.zeros[size_t((c * 8 + kAwqOrder[j]) * groups + g)] = uint8_t((word >> (4 * j)) & 15u);
      }
    }
  } else {
    // qweight [k / 8, n] along the input features; qzeros [groups, n / 8] plain, stored minus
    // zero_offset (v1's stored 15 is zero point 16).
    if (q.g_idx != nullptr) {
      TANDEM_ASSIGN_OR_RETURN(perm, act_order_perm(*q.g_idx, k, groups, group_size, module));
    }
    parallel_ranges(n, 64, [&](int64_t first, int64_t last) {
      std::vector<uint8_t> row(static_cast<size_t>(k));
      for (int64_t o = first; o < last; ++o) {
        for (int64_t c = 0; c < k / 8; ++c) {
          const uint32_t word = load_u32(qweight.data, c * n + o);
          for (int j = 0; j < 8; ++j) row[size_t(c * 8 + j)] = uint8_t((word >> (4 * j)) & 15u);
        }
        uint8_t* dst = p.q.data() + o * k;
        for (int64_t i = 0; i < k; ++i)
          dst[i] = perm.empty() ? row[size_t(i)] : row[size_t(perm[size_t(i)])];
      }
    });
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t c = 0; c < packed_n; ++c) {
        const uint32_t word = load_u32(q.zeros->data, g * packed_n + c);
        for (int j = 0; j < 8; ++j) {
          p.zeros[size_t((c * 8 + j) * groups + g)] =
              uint8_t(int32_t((word >> (4 * j)) & 15u) + q.zero_offset);
        }
      }
    }
  }
  return to_layout(p, std::move(perm));
}

void int4_layout_row(const Int4Layout& w, int64_t r, float* out) {
  const int64_t groups = w.k / w.group_size;
  for (int64_t i = 0; i < w.k; ++i) {
    const auto [word, shift] = nibble_at(w.k, r, i);
    const int quant = int((w.qweight[size_t(word)] >> shift) & 15u);
    const size_t at = size_t(group_index(groups, r, i / w.group_size));
    const float v = float(quant - int(w.zeros[at])) * f16_to_f32(w.scales[at]);
    out[w.perm.empty() ? i : w.perm[size_t(i)]] = v;
  }
}

}  // namespace tandem
