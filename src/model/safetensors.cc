// Reading safetensors: the 8-byte little-endian header length, the JSON header, then the data
// section that every tensor's data_offsets index into. Every field is checked before a
// TensorView is made, so a truncated or hand-edited file is an Error, never a wild read.
#include "model/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/mapped_file.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

// The reference implementation caps the header at 100 MB; a larger value is corruption.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

Error invalid(const std::string& file, const std::string& what) {
  return make_error(ErrorCode::kInvalidModel, file + ": " + what);
}

Error tensor_error(const std::string& file, const std::string& tensor, const std::string& what) {
  return make_error(ErrorCode::kInvalidModel, file + ": tensor '" + tensor + "': " + what);
}

Result<TensorView> parse_entry(const MappedFile& f, const std::string& name,
                               const nlohmann::json& e, const std::byte* data_begin,
                               uint64_t data_bytes) {
  const std::string& file = f.path();
  if (!e.is_object()) return tensor_error(file, name, "header entry is not an object");
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end()) return tensor_error(file, name, "missing 'dtype'");
  if (!dt->is_string()) return tensor_error(file, name, "'dtype' must be a string");
  if (sh == e.end()) return tensor_error(file, name, "missing 'shape'");
  if (!sh->is_array()) return tensor_error(file, name, "'shape' must be a list of integers");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return tensor_error(file, name, "'data_offsets' must be two non-negative integers");
  }
  TensorView t;
  t.name = name;
  t.file = file;
  std::optional<DType> dtype = dtype_from_safetensors(dt->get<std::string>());
  if (!dtype) return tensor_error(file, name, "unknown dtype '" + dt->get<std::string>() + "'");
  t.dtype = *dtype;

  // numel in 128 bits' worth of care: any overflow is a corrupt header, not a huge tensor.
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) return tensor_error(file, name, "shape has a negative entry");
    uint64_t v = d.get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<int64_t>::max()) ||
        (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v)) {
      return tensor_error(file, name, "shape overflows");
    }
    numel *= v;
    t.shape.push_back(int64_t(v));
  }
  uint64_t begin = (*off)[0].get<uint64_t>();
  uint64_t end = (*off)[1].get<uint64_t>();
  if (begin > end) {
    return tensor_error(file, name,
                        "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            "] are out of order");
  }
  if (end > data_bytes) {
    return tensor_error(file, name,
                        "data_offsets end " + std::to_string(end) + " is past the data section (" +
                            std::to_string(data_bytes) + " bytes)");
  }
  uint64_t elem = dtype_size(t.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / elem || numel * elem != end - begin) {
    std::ostringstream msg;
    msg << "dtype " << dtype_name(t.dtype) << " x shape [";
    for (size_t i = 0; i < t.shape.size(); ++i) msg << (i ? ", " : "") << t.shape[i];
    msg << "] needs " << numel * elem << " bytes but data_offsets span " << end - begin;
    return tensor_error(file, name, msg.str());
  }
  t.data = data_begin + begin;
  t.nbytes = size_t(end - begin);
  return t;
}

// Parses and validates one mapped file; views point into its mapping.
Result<std::vector<TensorView>> parse_file(const MappedFile& f) {
  const std::string& file = f.path();
  if (f.size() < 8) {
    return invalid(file, "truncated: " + std::to_string(f.size()) +
                             " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(f.data()[i]);
  if (header_len > kMaxHeaderBytes) {
    return invalid(file, "header length " + std::to_string(header_len) +
                             " exceeds the 100 MB limit (corrupt or not safetensors)");
  }
  if (header_len > f.size() - 8) {
    return invalid(file, "header length " + std::to_string(header_len) +
                             " runs past the end of the file (" + std::to_string(f.size()) +
                             " bytes): truncated");
  }
  const char* hp = reinterpret_cast<const char*>(f.data() + 8);
  nlohmann::json header =
      nlohmann::json::parse(hp, hp + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return invalid(file, "header is not valid JSON");
  if (!header.is_object()) return invalid(file, "header is not a JSON object");

  const std::byte* data_begin = f.data() + 8 + header_len;
  uint64_t data_bytes = f.size() - 8 - header_len;
  std::vector<TensorView> views;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return invalid(file, "'__metadata__' is not an object");
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(TensorView t, parse_entry(f, it.key(), *it, data_begin, data_bytes));
    views.push_back(std::move(t));
  }

  // Two tensors sharing bytes would alias silently; sort by start and compare neighbours.
  std::vector<const TensorView*> by_start;
  for (const TensorView& t : views) {
    if (t.nbytes > 0) by_start.push_back(&t);
  }
  std::sort(by_start.begin(), by_start.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_start.size(); ++i) {
    const TensorView* prev = by_start[i - 1];
    const TensorView* cur = by_start[i];
    if (cur->data < prev->data + prev->nbytes) {
      return tensor_error(file, cur->name, "bytes overlap tensor '" + prev->name + "'");
    }
  }
  return views;
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIo, path + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Checkpoints tandem refuses to load: torch.load unpickles, which runs arbitrary code.
bool is_pickle_checkpoint(const fs::path& p) {
  std::string ext = p.extension().string();
  return ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt";
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;
WeightStore::~WeightStore() = default;

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes;
  return n;
}

Result<WeightStore> WeightStore::open_file(const std::string& path) {
  WeightStore store;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> f, MappedFile::open(path));
  TANDEM_ASSIGN_OR_RETURN(std::vector<TensorView> views, parse_file(*f));
  for (TensorView& t : views) {
    std::string name = t.name;
    store.tensors_.emplace(std::move(name), std::move(t));
  }
  store.files_.push_back(std::move(f));
  return store;
}

Result<WeightStore> WeightStore::open(const std::string& model_dir) {
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kNotFound, model_dir + ": not a directory");
  }
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";

  // shard file name -> tensor names the index puts there (empty when there is no index)
  std::map<std::string, std::set<std::string>> shards;
  // transformers looks for model.safetensors first, then the index; so do we.
  const bool have_index = !fs::exists(single_path, ec) && fs::exists(index_path, ec);
  if (fs::exists(single_path, ec)) {
    shards["model.safetensors"];
  } else if (have_index) {
    const std::string ip = index_path.string();
    TANDEM_ASSIGN_OR_RETURN(std::string text, read_text(ip));
    nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object()) return invalid(ip, "not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object() || wm->empty()) {
      return invalid(ip, "missing or empty 'weight_map'");
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string())
        return invalid(ip, "weight_map entry '" + it.key() + "' is not a file name");
      std::string shard = it->get<std::string>();
      // A shard name is a file in the directory, never a path that escapes it.
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return invalid(ip,
                       "weight_map entry '" + it.key() + "' names an invalid file '" + shard + "'");
      }
      shards[shard].insert(it.key());
    }
  } else {
    // No standard name: take every *.safetensors (single-shard exports without an index).
    bool pickle = false;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (!entry.is_regular_file()) continue;
      if (entry.path().extension() == ".safetensors") shards[entry.path().filename().string()];
      if (is_pickle_checkpoint(entry.path())) pickle = true;
    }
    if (shards.empty() && pickle) {
      return make_error(ErrorCode::kUnsupported,
                        model_dir +
                            ": only PyTorch pickle checkpoints (.bin/.pt) found; tandem "
                            "never unpickles weights (it can run code). Convert the model "
                            "to safetensors, e.g. with transformers' save_pretrained("
                            "safe_serialization=True)");
    }
    if (shards.empty()) {
      return make_error(ErrorCode::kNotFound, model_dir +
                                                  ": no model.safetensors, "
                                                  "model.safetensors.index.json or "
                                                  "*.safetensors file");
    }
  }

  WeightStore store;
  for (const auto& [shard, listed] : shards) {
    const std::string path = (dir / shard).string();
    if (have_index && !fs::exists(path, ec)) {
      return invalid(index_path.string(), "names shard '" + shard + "' (for tensor '" +
                                              *listed.begin() + "'), which does not exist");
    }
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> f, MappedFile::open(path));
    TANDEM_ASSIGN_OR_RETURN(std::vector<TensorView> views, parse_file(*f));
    std::set<std::string> present;
    for (TensorView& t : views) {
      present.insert(t.name);
      auto [it, inserted] = store.tensors_.emplace(t.name, t);
      if (!inserted) {
        return tensor_error(path, t.name,
                            "also present in " + it->second.file + " (duplicate across shards)");
      }
    }
    for (const std::string& name : listed) {
      if (!present.count(name)) {
        return invalid(index_path.string(), "says tensor '" + name + "' is in " + shard +
                                                ", but that file has no such tensor");
      }
    }
    store.files_.push_back(std::move(f));
  }
  return store;
}

}  // namespace tandem
