#include "transport/local/local_transport.h"

#include <cstring>
#include <thread>

namespace tandem {

Result<KvTransport::Ticket> LocalTransport::ship(const ShipOrder& order) {
  TANDEM_TRY(validate_ship_order(order));
  if (order.src->device >= 0 || order.dst->device >= 0) {
    return make_error(ErrorCode::kTransport, "the local transport copies host memory only");
  }
  Entry entry;
  std::optional<Error> fault = fault_hook_ ? fault_hook_(order) : std::nullopt;
  if (fault && fault->code == ErrorCode::kTimeout) {
    entry.state = ShipState::kInFlight;  // a stuck backend: never completes by itself
  } else if (fault) {
    entry.state = ShipState::kFailed;
    entry.error = *fault;
  } else {
    const size_t pb = order.src->page_bytes;
    for (int32_t l = order.layer_begin; l < order.layer_end; ++l) {
      for (const PageCopy& p : order.pages) {
        std::memcpy(order.dst->k[size_t(l)] + size_t(p.dst) * pb,
                    order.src->k[size_t(l)] + size_t(p.src) * pb, pb);
        std::memcpy(order.dst->v[size_t(l)] + size_t(p.dst) * pb,
                    order.src->v[size_t(l)] + size_t(p.src) * pb, pb);
      }
    }
    entry.state = ShipState::kDone;
  }
  std::lock_guard lock(mu_);
  const Ticket t = next_++;
  tickets_.emplace(t, std::move(entry));
  return t;
}

ShipState LocalTransport::poll(Ticket ticket) {
  std::lock_guard lock(mu_);
  auto it = tickets_.find(ticket);
  return it == tickets_.end() ? ShipState::kFailed : it->second.state;
}

ShipState LocalTransport::wait(Ticket ticket, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const ShipState s = poll(ticket);
    if (s != ShipState::kInFlight) return s;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::lock_guard lock(mu_);
      Entry& e = tickets_[ticket];
      e.state = ShipState::kFailed;
      e.error = make_error(ErrorCode::kTimeout, "KV transfer did not complete within " +
                                                    std::to_string(timeout.count()) + " ms");
      return ShipState::kFailed;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Error LocalTransport::take_error(Ticket ticket) {
  std::lock_guard lock(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return make_error(ErrorCode::kTransport, "unknown transfer ticket");
  Error e = it->second.error;
  tickets_.erase(it);
  return e;
}

void LocalTransport::release(Ticket ticket) {
  std::lock_guard lock(mu_);
  tickets_.erase(ticket);
}

}  // namespace tandem
