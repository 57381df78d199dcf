#include "model/mkmodel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/parallel_ranges.h"
#include "model/mkmodel_presets.h"
#include "model/mkmodel_quant.h"
#include "model/random_weights.h"
#include "model/safetensors.h"
#include "model/weight_names.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

// Elements generated per round: 16 Mi elements is 32 MB of bf16, the whole memory footprint.
constexpr size_t kChunkElems = size_t{16} << 20;

struct PlannedTensor {
  ExpectedTensor tensor;
  uint64_t numel = 0;
  uint64_t nbytes = 0;
  DType dtype = DType::kBF16;
};

mkmodel::Init init_of(ExpectedTensor::Kind kind) {
  switch (kind) {
    case ExpectedTensor::Kind::kNorm:
      return mkmodel::Init::kOnes;
    case ExpectedTensor::Kind::kBias:
      return mkmodel::Init::kSmall;
    case ExpectedTensor::Kind::kEmbedding:
    case ExpectedTensor::Kind::kLinear:
    case ExpectedTensor::Kind::kQuantized:  // quantized from kNormal floats (QuantizedModule)
      return mkmodel::Init::kNormal;
  }
  return mkmodel::Init::kNormal;
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return make_error(ErrorCode::kIo, path.string() + ": cannot write");
  return Status::Ok();
}

// Earlier shards of another preset or shard size would be mixed into this model by a loader.
Status remove_old_weights(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".safetensors" || name == "model.safetensors.index.json") {
      old.push_back(e.path());
    }
  }
  if (ec) return make_error(ErrorCode::kIo, dir.string() + ": cannot list: " + ec.message());
  for (const fs::path& p : old) {
    if (!fs::remove(p, ec)) {
      return make_error(ErrorCode::kIo, p.string() + ": cannot remove: " + ec.message());
    }
  }
  return Status::Ok();
}

// Tokenizer files transformers' AutoTokenizer reads, whichever of them the source has.
bool is_tokenizer_file(const std::string& name) {
  static const char* const kNames[] = {
      "special_tokens_map.json", "vocab.json",          "merges.txt",
      "added_tokens.json",       "chat_template.jinja", "chat_template.json"};
  if (name.rfind("tokenizer", 0) == 0) return true;
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

Status copy_tokenizer(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::exists(from / "tokenizer.json", ec)) {
    return make_error(ErrorCode::kNotFound, (from / "tokenizer.json").string() +
                                                ": missing (--tokenizer must name a "
                                                "folder with tokenizer.json)");
  }
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (!e.is_regular_file() || !is_tokenizer_file(e.path().filename().string())) continue;
    fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return make_error(ErrorCode::kIo, e.path().string() + ": cannot copy: " + ec.message());
    }
  }
  if (ec) return make_error(ErrorCode::kIo, from.string() + ": cannot list: " + ec.message());
  return Status::Ok();
}

// Two chunk buffers: threads fill one while the previous chunk is written from the other, so
// generation and the write into the page cache overlap.
class ChunkStream {
 public:
  ChunkStream(SafetensorsWriter& writer, size_t chunk_bytes) : writer_(writer) {
    for (auto& b : buffers_) b.resize(chunk_bytes);
  }
  // Waits for the write in flight (the destructor of a std::async future would too).
  ~ChunkStream() { (void)wait(); }

  std::byte* next_buffer() { return buffers_[next_].data(); }
  // Starts writing the first `bytes` of next_buffer() and switches buffers.
  Status submit(size_t bytes) {
    TANDEM_TRY(wait());
    std::span<const std::byte> piece(buffers_[next_].data(), bytes);
    pending_ = std::async(std::launch::async, [this, piece] { return writer_.write(piece); });
    next_ ^= 1;
    return Status::Ok();
  }
  Status wait() {
    if (!pending_.valid()) return Status::Ok();
    return pending_.get();
  }

 private:
  SafetensorsWriter& writer_;
  std::vector<std::byte> buffers_[2];  // [kChunkElems] of dtype each
  int next_ = 0;
  std::future<Status> pending_;
};

// Writes elements [first, first + count) of one tensor; any split gives the same bytes.
using FillFn = std::function<void(uint64_t first, size_t count, std::byte* out)>;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How one tensor's values are made: random, or (pattern models) a scaled residual write or the
// pattern lm_head.
FillFn fill_of(const PlannedTensor& t, uint64_t key, DType dtype, const mkmodel::Preset& preset,
               uint64_t seed, const mkmodel::PatternMap* pattern) {
  const mkmodel::Init init = init_of(t.tensor.kind);
  const std::string& name = t.tensor.name;
  if (pattern != nullptr && name == "lm_head.weight") {
    const uint64_t embed_key =
        mkmodel::tensor_key(seed, preset.seed_salt, "model.embed_tokens.weight");
    const int64_t hidden = preset.config.hidden_size;
    return [=](uint64_t first, size_t count, std::byte* out) {
      mkmodel::fill_pattern_lm_head(*pattern, embed_key, hidden, first, count, dtype, out);
    };
  }
  if (pattern != nullptr &&
      (ends_with(name, "self_attn.o_proj.weight") || ends_with(name, "mlp.down_proj.weight"))) {
    const float scale = mkmodel::pattern_residual_scale(preset.config);
    return [=](uint64_t first, size_t count, std::byte* out) {
      mkmodel::fill_weights(key, init, first, count, dtype, out);
      mkmodel::scale_values(out, count, dtype, scale);
    };
  }
  return [=](uint64_t first, size_t count, std::byte* out) {
    mkmodel::fill_weights(key, init, first, count, dtype, out);
  };
}

// The tensors of the quantized Linear being written: a Linear's tensors are consecutive in
// expected_tensors order, so one module is held at a time.
struct QuantizedModule {
  std::string module;
  std::map<std::string, std::vector<std::byte>> tensors;  // full name → stored bytes
};

// Quantizes `module` from the float weights its unquantized checkpoint would have.
void quantize_module(QuantizedModule& cache, const std::string& module, const ModelConfig& config,
                     const mkmodel::Preset& preset, uint64_t seed,
                     const mkmodel::PatternMap* pattern) {
  if (cache.module == module) return;
  int64_t out = 0, in = 0;
  for (const LinearModule& l : layer_linears(config)) {
    if (l.module == module) {
      out = l.out_features;
      in = l.in_features;
    }
  }
  PlannedTensor dense;
  dense.tensor = {module + ".weight", {out, in}, ExpectedTensor::Kind::kLinear};
  dense.numel = uint64_t(out * in);
  dense.dtype = DType::kF32;
  const uint64_t key = mkmodel::tensor_key(seed, preset.seed_salt, dense.tensor.name);
  std::vector<float> w(size_t(dense.numel));  // [out, in]
  fill_of(dense, key, DType::kF32, preset, seed, pattern)(0, w.size(),
                                                          reinterpret_cast<std::byte*>(w.data()));
  cache.module = module;
  cache.tensors = mkmodel::quantize_linear(config.quant, module, out, in, w, key);
}

// Generates one tensor in chunks, each chunk split across threads, and streams it out.
Status write_tensor(ChunkStream& stream, const PlannedTensor& t, const FillFn& fill, DType dtype) {
  const size_t elem = dtype_size(dtype);
  for (uint64_t first = 0; first < t.numel; first += kChunkElems) {
    const size_t count = size_t(std::min<uint64_t>(kChunkElems, t.numel - first));
    std::byte* out = stream.next_buffer();
    parallel_ranges(int64_t(count), int64_t{1} << 16, [&](int64_t b, int64_t e) {
      fill(first + uint64_t(b), size_t(e - b), out + size_t(b) * elem);
    });
    TANDEM_TRY(stream.submit(count * elem));
  }
  return Status::Ok();
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

std::vector<std::string> mkmodel_presets() {
  std::vector<std::string> names;
  for (const mkmodel::Preset& p : mkmodel::presets()) names.push_back(p.name);
  return names;
}

Status make_model(const MkModelOptions& options) {
  const mkmodel::Preset* found = mkmodel::find_preset(options.preset);
  if (found == nullptr) {
    std::string all;
    for (const std::string& n : mkmodel_presets()) all += (all.empty() ? "" : ", ") + n;
    return make_error(ErrorCode::kInvalidArgument,
                      "unknown mkmodel preset '" + options.preset + "' (presets: " + all + ")");
  }
  if (options.pattern && !(options.pattern->divergence >= 0 && options.pattern->divergence <= 1)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "mkmodel: --pattern-divergence must be in [0, 1]");
  }
  if (options.pattern && (options.pattern->tokens < 0 ||
                          (options.pattern->tokens > 0 && options.pattern->tokens < 3))) {
    return make_error(ErrorCode::kInvalidArgument,
                      "mkmodel: --pattern-tokens must be 0 (all ids below bos) or >= 3");
  }
  // A pattern model unties lm_head (same shape and matmul as the tied read of the embedding).
  mkmodel::Preset copy = *found;
  if (options.pattern) copy.config.tie_word_embeddings = false;
  std::optional<mkmodel::QuantChoice> quant;
  if (!options.quantization.empty()) {
    TANDEM_ASSIGN_OR_RETURN(quant, mkmodel::quantization_choice(options.quantization, copy.config));
    copy.config.quant = quant->config;
  }
  const mkmodel::Preset* preset = &copy;
  std::optional<mkmodel::PatternMap> pattern;
  if (options.pattern) pattern.emplace(*options.pattern, copy.config);
  if (options.out_dir.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "mkmodel: no output directory");
  }
  if (options.max_shard_bytes <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "mkmodel: max_shard_bytes must be positive");
  }
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16 &&
      options.dtype != DType::kF32) {
    return make_error(ErrorCode::kInvalidArgument, "mkmodel: dtype " +
                                                       std::string(dtype_name(options.dtype)) +
                                                       " is not one of BF16, F16, F32");
  }
  const fs::path dir(options.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::kIo, dir.string() + ": cannot create: " + ec.message());
  TANDEM_TRY(remove_old_weights(dir));

  nlohmann::ordered_json config = mkmodel::config_json(*preset, options.dtype);
  if (quant) config["quantization_config"] = quant->json;
  TANDEM_TRY(write_text(dir / "config.json", config.dump(2) + "\n"));
  TANDEM_TRY(write_text(dir / "generation_config.json", preset->generation.dump(2) + "\n"));
  if (!options.tokenizer_dir.empty()) TANDEM_TRY(copy_tokenizer(options.tokenizer_dir, dir));
  if (pattern) {
    const nlohmann::ordered_json info = {
        {"seed", options.pattern->seed},
        {"divergence", options.pattern->divergence},
        {"tokens", pattern->tokens()},
        {"residual_scale", mkmodel::pattern_residual_scale(copy.config)}};
    TANDEM_TRY(write_text(dir / "pattern.json", info.dump(2) + "\n"));
  } else {
    fs::remove(dir / "pattern.json", ec);
  }

  // Plan shards greedily in save order, as transformers' shard_checkpoint does.
  std::vector<std::vector<PlannedTensor>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  size_t max_elem = dtype_size(options.dtype);
  for (ExpectedTensor& t : expected_tensors(preset->config)) {
    PlannedTensor p;
    // A quantized Linear's tensors have their format's dtypes (the first one listed).
    p.dtype = t.kind == ExpectedTensor::Kind::kQuantized ? t.dtypes.at(0) : options.dtype;
    max_elem = std::max(max_elem, dtype_size(p.dtype));
    p.numel = 1;
    for (int64_t d : t.shape) p.numel *= uint64_t(d);
    p.nbytes = p.numel * dtype_size(p.dtype);
    p.tensor = std::move(t);
    if (!shards.back().empty() && shard_bytes + p.nbytes > uint64_t(options.max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += p.nbytes;
    total_bytes += p.nbytes;
    shards.back().push_back(std::move(p));
  }

  QuantizedModule quantized;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        shards.size() == 1 ? "model.safetensors" : shard_name(s, shards.size());
    std::vector<SafetensorsWriter::Entry> entries;
    for (const PlannedTensor& p : shards[s]) {
      entries.push_back({p.tensor.name, p.dtype, p.tensor.shape});
      weight_map[p.tensor.name] = name;
    }
    TANDEM_ASSIGN_OR_RETURN(
        SafetensorsWriter writer,
        SafetensorsWriter::create((dir / name).string(), std::move(entries), {{"format", "pt"}}));
    {
      ChunkStream stream(writer, kChunkElems * max_elem);
      for (const PlannedTensor& p : shards[s]) {
        const uint64_t key = mkmodel::tensor_key(options.seed, preset->seed_salt, p.tensor.name);
        FillFn fill;
        if (p.tensor.kind == ExpectedTensor::Kind::kQuantized) {
          quantize_module(quantized, p.tensor.module, preset->config, *preset, options.seed,
                          pattern ? &*pattern : nullptr);
          const std::vector<std::byte>& bytes = quantized.tensors.at(p.tensor.name);
          const size_t elem = dtype_size(p.dtype);
          TANDEM_CHECK(bytes.size() == p.numel * elem, "%s: %zu bytes quantized, %llu planned",
                       p.tensor.name.c_str(), bytes.size(), (unsigned long long)(p.numel * elem));
          fill = [&bytes, elem](uint64_t first, size_t count, std::byte* out) {
            std::memcpy(out, bytes.data() + first * elem, count * elem);
          };
        } else {
          fill =
              fill_of(p, key, options.dtype, *preset, options.seed, pattern ? &*pattern : nullptr);
        }
        TANDEM_TRY(write_tensor(stream, p, fill, p.dtype));
      }
      TANDEM_TRY(stream.wait());
    }
    TANDEM_TRY(writer.finish());
  }
  if (shards.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}},
                                    {"weight_map", weight_map}};
    TANDEM_TRY(write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return Status::Ok();
}

}  // namespace tandem
