// KV page shipping between the prefill and decode stages. One narrow interface: ship a list of
// (source page -> destination page) copies for a layer range from one KV pool to another, get a
// ticket, poll or wait it, abort it. The transport never sees requests, only pages; the stages do
// the bookkeeping. Backends live in subfolders (local/, peer/, nccl/, host_staged/).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "kv/kv_pool_view.h"

namespace tandem {

struct PageCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

struct ShipOrder {
  const KvPoolView* src = nullptr;
  const KvPoolView* dst = nullptr;
  std::vector<PageCopy> pages;
  int32_t layer_begin = 0;  // [layer_begin, layer_end)
  int32_t layer_end = 0;

  size_t bytes() const {
    return pages.size() * size_t(layer_end - layer_begin) * 2 * (src ? src->page_bytes : 0);
  }
};

enum class ShipState { kInFlight, kDone, kFailed };

struct TransportCaps {
  bool host_to_host = false;
  bool device_to_device = false;  // between two different devices
  bool same_device = false;
};

class KvTransport {
 public:
  using Ticket = uint64_t;
  virtual ~KvTransport() = default;

  virtual std::string_view name() const = 0;
  virtual TransportCaps caps() const = 0;

  // Validates the order (layouts match, page ids in range) and starts it. Copies of one ticket
  // complete in order with respect to later tickets on the same transport.
  virtual Result<Ticket> ship(const ShipOrder& order) = 0;
  virtual ShipState poll(Ticket ticket) = 0;
  // Blocks until the ticket is done, failed, or `timeout` passes (then it is aborted and
  // reported as kFailed with a kTimeout error).
  virtual ShipState wait(Ticket ticket, std::chrono::milliseconds timeout) = 0;
  // The error of a failed ticket; forgets the ticket.
  virtual Error take_error(Ticket ticket) = 0;
  // Forget a finished ticket (done or failed) or abandon an in-flight one.
  virtual void release(Ticket ticket) = 0;
};

// Checks that an order can run between these two pools: same layer count and page bytes, page
// ids in range, layer range valid. Every backend calls it first.
Status validate_ship_order(const ShipOrder& order);

}  // namespace tandem
