#include "runner/cpu/int4_dot.h"

#include "core/check.h"
#include "core/target_clones.h"
#include "model/dequant.h"
#include "runner/cpu/vec8.h"

namespace tandem {

namespace {

using namespace vec8;

constexpr int64_t kMostCols = kInt4DotRows / 8;

// Lane j: the shift that brings element j of a word in format f's order to its low nibble.
TANDEM_INLINE void nibble_shifts(QuantFormat f, u32x8& shifts) {
  for (int j = 0; j < 8; ++j) shifts[j] = uint32_t(4 * int4_nibble_of(f, j));
}

// AWQ: qweight [in, out / 8]; word (i, c) holds input i of rows c * 8 .. c * 8 + 7. Each word
// gives 8 rows' weights at one input, so a vector holds rows and acc[i % 8][c] their lane
// i % 8.
TANDEM_INLINE void awq_rows(const float* x, const TensorView& w, const LinearQuant& q, int64_t row0,
                            int64_t count, const float* bias, float* y) {
  const int64_t in = q.in_features, packed_cols = q.out_features / 8;
  const int64_t c0 = row0 / 8, cols = count / 8;
  const Int4GroupTables t = int4_group_tables(q, row0, count);
  u32x8 shifts;
  nibble_shifts(QuantFormat::kAwq, shifts);
  f32x8 acc[8][kMostCols] = {};  // [lane, column]: rows c * 8 + j in element j
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / q.group_size;
    const int32_t* zero = t.zero.data() + g * count;
    const float* scale = t.scale.data() + g * count;
    const float xi = x[i];
    f32x8* lane = acc[i % 8];
    for (int64_t c = 0; c < cols; ++c) {
      const u32x8 word = u32x8{} + load_u32(w.data, i * packed_cols + c0 + c);
      const i32x8 quant = (i32x8)((word >> shifts) & 15u);
      const i32x8 z = *reinterpret_cast<const i32x8_view*>(zero + c * 8);
      const f32x8 weight = __builtin_convertvector(quant - z, f32x8) * TANDEM_LOAD8(scale + c * 8);
      lane[c] += xi * weight;
    }
  }
  // Row c * 8 + j's lanes are element j of acc[0..7][c]; the tail is the empty sum, 0 (in is a
  // multiple of 8), as in dot_rows.
  for (int64_t c = 0; c < cols; ++c) {
    for (int j = 0; j < 8; ++j) {
      float lanes[8];  // [lane]
      for (int l = 0; l < 8; ++l) lanes[l] = acc[l][c][j];
      y[c * 8 + j] = reduce8(lanes, 0.0f) + (bias ? bias[c * 8 + j] : 0.0f);
    }
  }
}

// GPTQ: qweight [in / 8, out]; word (p, o) holds inputs 8p .. 8p + 7 of row o, which are its
// lanes 0..7: acc[r] += x[8p .. 8p + 7] * weights. Without g_idx the 8 inputs share a group;
// with it (act-order) each lane looks up its own.
TANDEM_INLINE void gptq_rows(const float* x, const TensorView& w, const LinearQuant& q,
                             int64_t row0, int64_t count, const float* bias, float* y) {
  const int64_t in = q.in_features, out = q.out_features;
  const Int4GroupTables t = int4_group_tables(q, row0, count);
  u32x8 shifts;
  nibble_shifts(QuantFormat::kGptq, shifts);
  f32x8 acc[kInt4DotRows] = {};  // [row]
  for (int64_t p = 0; p < in / 8; ++p) {
    const f32x8 xv = TANDEM_LOAD8(x + p * 8);
    int64_t g[8];  // [lane] the group of input 8p + lane
    for (int l = 0; l < 8; ++l) {
      g[l] = q.g_idx              ? int32_t(load_u32(q.g_idx->data, p * 8 + l))
             : q.group_size == -1 ? 0
                                  : (p * 8) / q.group_size;
    }
    for (int64_t r = 0; r < count; ++r) {
      const u32x8 word = u32x8{} + load_u32(w.data, p * out + row0 + r);
      const i32x8 quant = (i32x8)((word >> shifts) & 15u);
      i32x8 z;
      f32x8 s;
      for (int l = 0; l < 8; ++l) {
        z[l] = t.zero[size_t(g[l] * count + r)];
        s[l] = t.scale[size_t(g[l] * count + r)];
      }
      acc[r] += xv * (__builtin_convertvector(quant - z, f32x8) * s);
    }
  }
  for (int64_t r = 0; r < count; ++r) y[r] = reduce_lanes(acc[r], 0.0f) + (bias ? bias[r] : 0.0f);
}

}  // namespace

bool int4_dot_fits(const LinearQuant& q) {
  if (q.in_features % 8 != 0 || q.out_features % 8 != 0) return false;
  if (q.format == QuantFormat::kAwq) return q.group_size > 0;
  if (q.format == QuantFormat::kGptq)
    return q.g_idx != nullptr || q.group_size == -1 || (q.group_size > 0 && q.group_size % 8 == 0);
  return false;
}

TANDEM_CLONES void int4_dot_rows(const float* x, const TensorView& w, const LinearQuant& q,
                                 int64_t row0, int64_t count, const float* bias, float* y) {
  TANDEM_CHECK(int4_dot_fits(q) && row0 % 8 == 0 && count % 8 == 0 && count <= kInt4DotRows &&
                   row0 + count <= q.out_features,
               "int4_dot_rows: rows [%lld, +%lld) of %s", (long long)row0, (long long)count,
               w.name.c_str());
  if (q.format == QuantFormat::kAwq) {
    awq_rows(x, w, q, row0, count, bias, y);
  } else {
    gptq_rows(x, w, q, row0, count, bias, y);
  }
}

}  // namespace tandem
