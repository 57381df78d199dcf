#include "transport/ship_pieces.h"

#include <algorithm>
#include <string>

namespace tandem {

Result<std::vector<ShipPiece>> plan_ship_pieces(int32_t num_pairs, int32_t layer_begin,
                                                int32_t layer_end, size_t page_bytes,
                                                size_t max_bytes, int32_t max_pairs) {
  std::vector<ShipPiece> pieces;
  if (num_pairs <= 0 || layer_end <= layer_begin) return pieces;
  const size_t per_pair_layer = 2 * page_bytes;  // K and V of one page of one layer
  if (per_pair_layer == 0 || per_pair_layer > max_bytes || max_pairs < 1) {
    return make_error(ErrorCode::kTransport, "a KV page of " + std::to_string(page_bytes) +
                                                 " B does not fit the " +
                                                 std::to_string(max_bytes) + " B staging slot");
  }
  const int32_t pairs_per =
      int32_t(std::min<size_t>({size_t(max_pairs), size_t(num_pairs), max_bytes / per_pair_layer}));
  const int32_t layers_per = int32_t(
      std::max<size_t>(1, std::min<size_t>(size_t(layer_end - layer_begin),
                                           max_bytes / (per_pair_layer * size_t(pairs_per)))));
  for (int32_t l = layer_begin; l < layer_end; l += layers_per) {
    const int32_t le = std::min(layer_end, l + layers_per);
    for (int32_t p = 0; p < num_pairs; p += pairs_per) {
      const int32_t pe = std::min(num_pairs, p + pairs_per);
      pieces.push_back({l, le, p, pe, size_t(le - l) * size_t(pe - p) * per_pair_layer});
    }
  }
  return pieces;
}

}  // namespace tandem
