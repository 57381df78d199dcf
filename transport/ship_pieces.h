// How a ship order is cut into pieces that fit a staging slot and one copy-kernel launch: groups
// of consecutive layers over a run of page pairs. Host-only arithmetic, shared by the staged GPU
// backends (peer without P2P, host_staged, nccl) and tested on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace tandem {

struct ShipPiece {
  int32_t layer_begin = 0;  // [layer_begin, layer_end)
  int32_t layer_end = 0;
  int32_t pair_begin = 0;  // [pair_begin, pair_end) into ShipOrder::pages
  int32_t pair_end = 0;
  size_t bytes = 0;  // staging bytes: layers * 2 (K, V) * pairs * page_bytes
};

// Layer groups outer, page runs inner; every piece is at most max_bytes and max_pairs pairs.
// Fails when even one pair of one layer (2 * page_bytes) does not fit max_bytes.
Result<std::vector<ShipPiece>> plan_ship_pieces(int32_t num_pairs, int32_t layer_begin,
                                                int32_t layer_end, size_t page_bytes,
                                                size_t max_bytes, int32_t max_pairs);

}  // namespace tandem
