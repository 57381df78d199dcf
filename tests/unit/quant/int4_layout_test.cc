// Int4Layout (model/device_quant_layout.h): AWQ and GPTQ checkpoints repacked for the CUDA
// kernels stand for exactly the weights dequant_rows reads, row by row and bit for bit; the tile
// order is the one kernels/int4_linear.cuh draws; stacking; what the layout refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "core/dtype.h"
#include "model/dequant.h"
#include "model/device_quant_layout.h"
#include "model/quant_pack.h"
#include "quant_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// One checkpoint Linear: its tensors and the LinearQuant over them.
struct Int4Checkpoint {
  std::unique_ptr<OwnedTensor> qweight, qzeros, scales, g_idx;
  LinearQuant q;
};

enum class Kind { kAwq, kGptqSym, kGptqV1, kGptqV2, kGptqDescAct };

Int4Checkpoint make_checkpoint(Kind kind, int64_t out, int64_t in, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t groups = group == -1 ? 1 : in / group;
  Int4Checkpoint c;
  const auto scales = random_f16_scales(rng, size_t(groups * out));
  c.scales = owned_tensor("scales", DType::kF16, {groups, out}, to_f16(scales));
  if (kind == Kind::kAwq) {
    c.qweight = owned_tensor("qweight", DType::kI32, {in, out / 8},
                             random_words(rng, size_t(in * out / 8)));
  } else {
    c.qweight = owned_tensor("qweight", DType::kI32, {in / 8, out},
                             random_words(rng, size_t(in / 8 * out)));
  }
  if (kind == Kind::kGptqSym) {  // every zero point 8, stored v1 as 7
    const std::vector<uint8_t> eights(size_t(groups * out), 8);
    c.qzeros = owned_tensor("qzeros", DType::kI32, {groups, out / 8},
                            pack_gptq_zeros(eights.data(), groups, out, 1));
  } else {  // random nibbles: v1 reads a stored 15 as zero point 16
    c.qzeros = owned_tensor("qzeros", DType::kI32, {groups, out / 8},
                            random_words(rng, size_t(groups * out / 8)));
  }
  c.q = int4_linear(kind == Kind::kAwq ? QuantFormat::kAwq : QuantFormat::kGptq, out, in, group,
                    &c.scales->view, &c.qzeros->view);
  c.q.zero_offset = kind == Kind::kGptqSym || kind == Kind::kGptqV1 ? 1 : 0;
  if (kind == Kind::kGptqDescAct) {
    std::vector<int32_t> g_idx(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) g_idx[size_t(i)] = group == -1 ? 0 : int32_t(i / group);
    std::shuffle(g_idx.begin(), g_idx.end(), rng);
    c.g_idx = owned_tensor("g_idx", DType::kI32, {in}, g_idx);
    c.q.g_idx = &c.g_idx->view;
  }
  return c;
}

Int4Layout repack(const Int4Checkpoint& c) {
  auto r = repack_int4(c.qweight->view, c.q, "model.layers.0.mlp.down_proj");
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return std::move(r).value();
}

// Rows of the layout that differ in any bit from dequant_rows.
int wrong_rows(const Int4Layout& w, const Int4Checkpoint& c, int64_t row0 = 0) {
  const int64_t k = c.q.in_features;
  std::vector<float> want(size_t(c.q.out_features * k));
  dequant_rows(c.qweight->view, c.q, 0, c.q.out_features, want.data());
  std::vector<float> got(static_cast<size_t>(k));
  int wrong = 0;
  for (int64_t r = 0; r < c.q.out_features; ++r) {
    int4_layout_row(w, row0 + r, got.data());
    wrong += std::memcmp(got.data(), want.data() + r * k, size_t(k) * 4) != 0;
  }
  return wrong;
}

std::string error_of(const Int4Checkpoint& c) {
  auto r = repack_int4(c.qweight->view, c.q, "model.layers.3.self_attn.o_proj");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kUnsupported);
  CHECK(r.error().message.find("model.layers.3.self_attn.o_proj") != std::string::npos);
  return r.error().message;
}

}  // namespace

TEST_CASE("int4 layout: AWQ and GPTQ repack to the weights dequant_rows reads, bit for bit") {
  struct Case {
    Kind kind;
    int64_t out, in, group;
  };
  // n not a multiple of 16 (a partial last tile), k / 32 odd (the lone last block), group sizes
  // from 32 to all of k; the last two span several of repacking's parallel ranges (16 packed
  // AWQ columns, 64 GPTQ rows, 8 tiles), a partial one last.
  const Case cases[] = {
      {Kind::kAwq, 520, 128, 128},       {Kind::kGptqDescAct, 264, 128, 64},
      {Kind::kAwq, 40, 96, 32},          {Kind::kAwq, 64, 256, 128},
      {Kind::kAwq, 8, 64, 64},           {Kind::kGptqSym, 48, 128, 32},
      {Kind::kGptqSym, 24, 96, -1},      {Kind::kGptqV1, 40, 96, 32},
      {Kind::kGptqV1, 16, 256, 128},     {Kind::kGptqV2, 56, 160, 32},
      {Kind::kGptqV2, 32, 128, -1},      {Kind::kGptqDescAct, 40, 96, 32},
      {Kind::kGptqDescAct, 24, 256, 64}, {Kind::kGptqDescAct, 16, 64, -1},
  };
  uint32_t seed = 1;
  for (const Case& t : cases) {
    CAPTURE(int(t.kind));
    CAPTURE(t.out);
    CAPTURE(t.in);
    CAPTURE(t.group);
    const Int4Checkpoint c = make_checkpoint(t.kind, t.out, t.in, t.group, seed++);
    const Int4Layout w = repack(c);
    CHECK(w.n == t.out);
    CHECK(w.k == t.in);
    CHECK(w.group_size == (t.group == -1 ? t.in : t.group));
    const int64_t tiles = (t.out + 15) / 16, groups = t.in / w.group_size;
    CHECK(w.qweight.size() == size_t(tiles * 2 * t.in));
    CHECK(w.scales.size() == size_t(tiles * groups * 16));
    CHECK(w.zeros.size() == w.scales.size());
    // A permutation only where act-order reorders the features.
    const bool reorders = t.kind == Kind::kGptqDescAct && t.group != -1;
    CHECK(w.perm.size() == size_t(reorders ? t.in : 0));
    CHECK(wrong_rows(w, c) == 0);
  }
}

TEST_CASE("int4 layout: zero points 0..16 arrive as stored plus the v1 offset") {
  const Int4Checkpoint c = make_checkpoint(Kind::kGptqV1, 64, 512, 32, 99);
  const Int4Layout w = repack(c);
  CHECK(*std::max_element(w.zeros.begin(), w.zeros.end()) == 16);
  CHECK(*std::min_element(w.zeros.begin(), w.zeros.end()) == 1);
  const Int4Checkpoint sym = make_checkpoint(Kind::kGptqSym, 16, 64, 32, 5);
  const Int4Layout ws = repack(sym);
  CHECK(std::all_of(ws.zeros.begin(), ws.zeros.end(), [](uint8_t z) { return z == 8; }));
}

TEST_CASE("int4 layout: act-order groups in order need no permutation") {
  Int4Checkpoint c = make_checkpoint(Kind::kGptqDescAct, 16, 128, 32, 3);
  std::vector<int32_t> in_order(128);
  for (int i = 0; i < 128; ++i) in_order[size_t(i)] = i / 32;
  c.g_idx = owned_tensor("g_idx", DType::kI32, {128}, in_order);
  c.q.g_idx = &c.g_idx->view;
  const Int4Layout w = repack(c);
  CHECK(w.perm.empty());
  CHECK(wrong_rows(w, c) == 0);
}

// The tile order written out as kernels/int4_linear.cuh draws it, independently of the repack
// code: the kernels read exactly this.
TEST_CASE("int4 layout: nibbles sit where the kernels' header says") {
  const int64_t n = 32, k = 96;  // two tiles, one pair and the lone block
  const Int4Checkpoint c = make_checkpoint(Kind::kGptqV2, n, k, 32, 17);
  const Int4Layout w = repack(c);
  // q[r, i] from the checkpoint (GPTQ plain order along the inputs).
  auto q_of = [&](int64_t r, int64_t i) {
    return int((load_u32(c.qweight->view.data, (i / 8) * n + r) >> (4 * (i % 8))) & 15u);
  };
  int wrong = 0;
  for (int64_t tile = 0; tile < n / 16; ++tile) {
    for (int64_t b = 0; b < k / 32; ++b) {
      for (int64_t lane = 0; lane < 32; ++lane) {
        for (int64_t s = 0; s < 2; ++s) {
          const int64_t word =
              tile * 2 * k + (b / 2 < k / 64 ? (b / 2) * 128 + lane * 4 + (b % 2) * 2 + s
                                             : (k / 64) * 128 + lane * 2 + s);
          for (int m = 0; m < 4; ++m) {
            for (int e = 0; e < 2; ++e) {
              const int64_t r = 16 * tile + lane / 4 + 8 * (m % 2);
              const int64_t i = 32 * b + 16 * s + 2 * (lane % 4) + 8 * (m / 2) + e;
              const int nibble = int((w.qweight[size_t(word)] >> (4 * (m + 4 * e))) & 15u);
              wrong += nibble != q_of(r, i);
            }
          }
        }
      }
    }
  }
  CHECK(wrong == 0);
  // scales and zeros: [tile, group, j, h] is row 16 * tile + 8h + j.
  int wrong_groups = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < k / 32; ++g) {
      const size_t at = size_t(((r / 16) * (k / 32) + g) * 16 + (r % 8) * 2 + (r % 16) / 8);
      const uint32_t packed = load_u32(c.qzeros->view.data, g * (n / 8) + r / 8);
      wrong_groups += w.zeros[at] != ((packed >> (4 * (r % 8))) & 15u);
      wrong_groups += w.scales[at] != f32_to_f16(float_element(c.scales->view, g * n + r));
    }
  }
  CHECK(wrong_groups == 0);
}

TEST_CASE("int4 layout: stack puts the lower matrix's rows under the upper's") {
  // 48 rows end on a tile (arrays concatenate); 40 rows end inside one (re-tiled).
  for (int64_t top_rows : {48, 40}) {
    CAPTURE(top_rows);
    const Int4Checkpoint top = make_checkpoint(Kind::kGptqV1, top_rows, 96, 32, 21);
    const Int4Checkpoint bottom = make_checkpoint(Kind::kGptqV1, 24, 96, 32, 22);
    Int4Layout w = repack(top);
    const Int4Layout below = repack(bottom);
    REQUIRE(w.can_stack(below));
    w.stack(below);
    CHECK(w.n == top_rows + 24);
    CHECK(w.qweight.size() == size_t((w.n + 15) / 16 * 2 * 96));
    CHECK(wrong_rows(w, top) == 0);
    CHECK(wrong_rows(w, bottom, top_rows) == 0);
  }
  const Int4Layout a = repack(make_checkpoint(Kind::kAwq, 16, 96, 32, 1));
  CHECK_FALSE(a.can_stack(repack(make_checkpoint(Kind::kAwq, 16, 128, 32, 2))));
  CHECK_FALSE(a.can_stack(repack(make_checkpoint(Kind::kAwq, 16, 96, -1, 3))));
  CHECK_FALSE(a.can_stack(repack(make_checkpoint(Kind::kGptqDescAct, 16, 96, 32, 4))));
  // Act-order matrices stack only under the same permutation (q|k|v share g_idx).
  const Int4Checkpoint first = make_checkpoint(Kind::kGptqDescAct, 24, 96, 32, 8);
  Int4Checkpoint second = make_checkpoint(Kind::kGptqV1, 16, 96, 32, 9);
  second.q.g_idx = first.q.g_idx;
  second.q.zero_offset = 0;
  Int4Layout qk = repack(first);
  const Int4Layout k_part = repack(second);
  REQUIRE(qk.can_stack(k_part));
  qk.stack(k_part);
  CHECK(wrong_rows(qk, first) == 0);
  CHECK(wrong_rows(qk, second, 24) == 0);
}

TEST_CASE("int4 layout: what the kernels cannot hold is kUnsupported, naming the field") {
  // in_features 48: GPTQ packs it, the kernels' 32-feature blocks do not.
  CHECK(error_of(make_checkpoint(Kind::kGptqV1, 16, 48, -1, 1)).find("in_features = 48") !=
        std::string::npos);
  // group_size 16 divides k but is below the kernels' block.
  CHECK(error_of(make_checkpoint(Kind::kAwq, 16, 64, 16, 2)).find("group_size = 16") !=
        std::string::npos);
  // Act-order groups of 33 and 31 features.
  Int4Checkpoint uneven = make_checkpoint(Kind::kGptqDescAct, 16, 64, 32, 3);
  std::vector<int32_t> g_idx(64, 1);
  for (int i = 0; i < 33; ++i) g_idx[size_t(i * 64 / 33)] = 0;
  CHECK(std::count(g_idx.begin(), g_idx.end(), 0) == 33);
  uneven.g_idx = owned_tensor("g_idx", DType::kI32, {64}, g_idx);
  uneven.q.g_idx = &uneven.g_idx->view;
  const std::string msg = error_of(uneven);
  CHECK(msg.find("g_idx") != std::string::npos);
  CHECK(msg.find("33") != std::string::npos);
  // bf16 scales are taken when fp16 holds them exactly, refused when it does not.
  Int4Checkpoint bf16 = make_checkpoint(Kind::kAwq, 8, 64, 32, 4);
  std::vector<uint16_t> exact(16, f32_to_bf16(0.0078125f));
  bf16.scales = owned_tensor("scales", DType::kBF16, {2, 8}, exact);
  bf16.q.scale = &bf16.scales->view;
  CHECK(wrong_rows(repack(bf16), bf16) == 0);
  std::vector<uint16_t> tiny = exact;
  tiny[5] = f32_to_bf16(1e-7f);  // subnormal in fp16: low bits lost
  bf16.scales = owned_tensor("scales", DType::kBF16, {2, 8}, tiny);
  bf16.q.scale = &bf16.scales->view;
  CHECK(error_of(bf16).find("scales [0, 5]") != std::string::npos);
}
