#include "transport/kv_transport.h"

#include <string>

namespace tandem {

Status validate_ship_order(const ShipOrder& o) {
  if (o.src == nullptr || o.dst == nullptr) {
    return make_error(ErrorCode::kTransport, "ship order without source or destination pool");
  }
  if (o.src->num_layers() != o.dst->num_layers() || o.src->page_bytes != o.dst->page_bytes) {
    return make_error(ErrorCode::kTransport,
                      "KV layouts differ between stages: " + std::to_string(o.src->num_layers()) +
                          " layers x " + std::to_string(o.src->page_bytes) + " B/page vs " +
                          std::to_string(o.dst->num_layers()) + " x " +
                          std::to_string(o.dst->page_bytes));
  }
  if (o.layer_begin < 0 || o.layer_end > o.src->num_layers() || o.layer_begin >= o.layer_end) {
    return make_error(ErrorCode::kTransport, "layer range [" + std::to_string(o.layer_begin) +
                                                 ", " + std::to_string(o.layer_end) +
                                                 ") is empty or outside the model");
  }
  for (const PageCopy& p : o.pages) {
    if (p.src < 0 || p.src >= o.src->num_pages || p.dst < 0 || p.dst >= o.dst->num_pages) {
      return make_error(ErrorCode::kTransport, "page copy " + std::to_string(p.src) + " -> " +
                                                   std::to_string(p.dst) + " is outside a pool");
    }
  }
  return Status::Ok();
}

}  // namespace tandem
