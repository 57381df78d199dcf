// safetensors reading and writing: a writer round trip, the reference writer's header padding,
// and one test per way a file can be broken, each naming the file and the tensor.
#include <doctest/doctest.h>

#include <cstring>

#include "model/safetensors.h"
#include "model_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

// Opens a file built from raw parts and returns the error (the file must be broken).
Error open_broken(const ScratchDir& dir, const std::string& bytes) {
  const std::string path = dir.file("broken.safetensors");
  write_bytes(path, bytes);
  auto store = WeightStore::open_file(path);
  REQUIRE_FALSE(store.ok());
  CHECK_MESSAGE(contains(store.error().message, path), store.error().message);
  return store.error();
}

}  // namespace

TEST_CASE("writer round trip: header padded to 8 with spaces, data in order, views in place") {
  ScratchDir dir("roundtrip");
  const std::string path = dir.file("t.safetensors");
  auto w = SafetensorsWriter::create(
      path, {{"b", DType::kF32, {2, 2}}, {"a", DType::kBF16, {3}}, {"empty", DType::kF16, {0, 4}}},
      {{"format", "pt"}});
  REQUIRE_MESSAGE(w.ok(), w.error().to_string());
  std::string b = f32_bytes({1, 2, 3, 4});
  const uint16_t a[3] = {f32_to_bf16(0.5f), f32_to_bf16(-1.0f), f32_to_bf16(2.0f)};
  // In pieces that straddle the tensor boundary: the writer is a byte stream.
  std::string all = b + std::string(reinterpret_cast<const char*>(a), 6);
  auto bytes = std::as_bytes(std::span(all.data(), all.size()));
  REQUIRE(w->write(bytes.subspan(0, 5)).ok());
  REQUIRE(w->write(bytes.subspan(5, 14)).ok());
  REQUIRE(w->write(bytes.subspan(19)).ok());
  REQUIRE(w->finish().ok());

  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  CHECK(header_len % 8 == 0);
  CHECK(file.size() == 8 + header_len + 22);
  std::string header = file.substr(8, header_len);
  CHECK(header.find("__metadata__") != std::string::npos);
  CHECK(header.find_last_not_of(' ') + 1 >= header_len - 7);  // at most 7 pad spaces

  auto store = WeightStore::open_file(path);
  REQUIRE_MESSAGE(store.ok(), store.error().to_string());
  CHECK(store->tensors().size() == 3);
  CHECK(store->total_bytes() == 22);
  const TensorView* tb = store->find("b");
  REQUIRE(tb != nullptr);
  CHECK(tb->dtype == DType::kF32);
  CHECK(tb->shape == std::vector<int64_t>{2, 2});
  CHECK(tb->numel() == 4);
  CHECK(tb->file == path);
  float got[4];
  std::memcpy(got, tb->data, 16);
  CHECK(got[3] == 4.0f);
  const TensorView* ta = store->find("a");
  REQUIRE(ta != nullptr);
  uint16_t a1;
  std::memcpy(&a1, ta->data + 2, 2);
  CHECK(bf16_to_f32(a1) == -1.0f);
  CHECK(store->find("empty")->nbytes == 0);
  CHECK(store->find("missing") == nullptr);
}

TEST_CASE("writer refuses too many bytes and an early finish, and removes the partial file") {
  ScratchDir dir("writer-errors");
  const std::string path = dir.file("t.safetensors");
  {
    auto w = SafetensorsWriter::create(path, {{"x", DType::kF32, {2}}});
    REQUIRE(w.ok());
    std::string twelve(12, '\0');
    auto st = w->write(std::as_bytes(std::span(twelve.data(), twelve.size())));
    CHECK_FALSE(st.ok());
    auto fin = w->finish();
    CHECK_FALSE(fin.ok());
    CHECK(contains(fin.error().message, "0 of 8"));
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("__metadata__ is allowed and not a tensor") {
  ScratchDir dir("metadata");
  const std::string path = dir.file("m.safetensors");
  write_bytes(path, raw_safetensors(R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32",)"
                                    R"("shape":[1],"data_offsets":[0,4]}})",
                                    f32_bytes({7})));
  auto store = WeightStore::open_file(path);
  REQUIRE_MESSAGE(store.ok(), store.error().to_string());
  CHECK(store->tensors().size() == 1);
}

TEST_CASE("broken: truncated file shorter than the length prefix") {
  ScratchDir dir("truncated");
  Error e = open_broken(dir, std::string("\x10\x00\x00", 3));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "truncated"));
}

TEST_CASE("broken: truncated file whose header runs past the end") {
  ScratchDir dir("truncated-header");
  std::string full =
      raw_safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1}));
  Error e = open_broken(dir, full.substr(0, 20));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "past the end"));
}

TEST_CASE("broken: a written file cut short in its data section names the last tensor") {
  ScratchDir dir("truncated-data");
  const std::string path = dir.file("w.safetensors");
  write_tensors(path, {{"first", {4}, ExpectedTensor::Kind::kBias},
                       {"last", {4}, ExpectedTensor::Kind::kBias}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  auto store = WeightStore::open_file(path);
  REQUIRE_FALSE(store.ok());
  CHECK(store.error().code == ErrorCode::kInvalidModel);
  CHECK(contains(store.error().message, path));
  CHECK(contains(store.error().message, "'last'"));
}

TEST_CASE("broken: header length over the 100 MB cap") {
  ScratchDir dir("huge-header");
  Error e = open_broken(dir, raw_safetensors("{}", "", int64_t{1} << 40));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "header length"));
}

TEST_CASE("broken: header JSON garbage") {
  ScratchDir dir("garbage");
  Error e = open_broken(dir, raw_safetensors("{\"x\": [1, 2,, }garbage", ""));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "JSON"));
}

TEST_CASE("broken: unknown dtype names the tensor") {
  ScratchDir dir("dtype");
  Error e =
      open_broken(dir, raw_safetensors(R"({"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]}})",
                                       f32_bytes({1})));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "'w'"));
  CHECK(contains(e.message, "Q4_K"));
}

TEST_CASE("broken: data_offsets past the end of the data section") {
  ScratchDir dir("offsets");
  Error e = open_broken(
      dir,
      raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32_bytes({1})));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "'w'"));
  CHECK(contains(e.message, "past the data section"));
}

TEST_CASE("broken: data_offsets out of order") {
  ScratchDir dir("order");
  Error e = open_broken(
      dir,
      raw_safetensors(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", f32_bytes({1})));
  CHECK(contains(e.message, "'w'"));
  CHECK(contains(e.message, "out of order"));
}

TEST_CASE("broken: dtype x shape disagrees with the byte span") {
  ScratchDir dir("mismatch");
  Error e =
      open_broken(dir, raw_safetensors(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})",
                                       f32_bytes({1, 2})));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "'w'"));
  CHECK(contains(e.message, "needs 6 bytes"));
}

TEST_CASE("broken: overlapping tensors name both") {
  ScratchDir dir("overlap");
  Error e =
      open_broken(dir, raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                       f32_bytes({1, 2, 3})));
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "overlap"));
  CHECK(contains(e.message, "'a'"));
  CHECK(contains(e.message, "'b'"));
}

TEST_CASE("broken: negative shape entry and malformed entries name the tensor") {
  ScratchDir dir("shape");
  Error neg =
      open_broken(dir, raw_safetensors(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                                       f32_bytes({1})));
  CHECK(contains(neg.message, "'w'"));
  Error no_offsets =
      open_broken(dir, raw_safetensors(R"({"v":{"dtype":"F32","shape":[1]}})", f32_bytes({1})));
  CHECK(contains(no_offsets.message, "'v'"));
  CHECK(contains(no_offsets.message, "data_offsets"));
  // Present but of the wrong type: said so, not "missing".
  Error dtype_list = open_broken(
      dir,
      raw_safetensors(R"({"u":{"dtype":[0,1],"shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})));
  CHECK(contains(dtype_list.message, "'u': 'dtype' must be a string"));
  Error shape_number = open_broken(
      dir,
      raw_safetensors(R"({"u":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", f32_bytes({1})));
  CHECK(contains(shape_number.message, "'shape' must be a list"));
  Error no_dtype = open_broken(
      dir, raw_safetensors(R"({"u":{"shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})));
  CHECK(contains(no_dtype.message, "missing 'dtype'"));
}

TEST_CASE("a file that does not exist is kNotFound naming it") {
  auto store = WeightStore::open_file("/nonexistent/dir/model.safetensors");
  REQUIRE_FALSE(store.ok());
  CHECK(store.error().code == ErrorCode::kNotFound);
  CHECK(contains(store.error().message, "/nonexistent/dir/model.safetensors"));
}
