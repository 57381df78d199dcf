// In-process copy between host pools (CPU stages). Synchronous: a ticket is done when ship()
// returns. A fault-injection hook lets tests fail or stall chosen tickets.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "transport/kv_transport.h"

namespace tandem {

class LocalTransport final : public KvTransport {
 public:
  // Test hook: called before each order runs; returning an Error fails that ticket, and
  // returning kTimeout-coded Error leaves it in flight forever (a stuck backend).
  using FaultHook = std::function<std::optional<Error>(const ShipOrder&)>;

  std::string_view name() const override { return "local"; }
  TransportCaps caps() const override { return {true, false, true}; }
  Result<Ticket> ship(const ShipOrder& order) override;
  ShipState poll(Ticket ticket) override;
  ShipState wait(Ticket ticket, std::chrono::milliseconds timeout) override;
  Error take_error(Ticket ticket) override;
  void release(Ticket ticket) override;

  void set_fault_hook(FaultHook hook) { fault_hook_ = std::move(hook); }

 private:
  struct Entry {
    ShipState state = ShipState::kInFlight;
    Error error;
  };
  std::mutex mu_;
  std::map<Ticket, Entry> tickets_;
  Ticket next_ = 1;
  FaultHook fault_hook_;
};

}  // namespace tandem
