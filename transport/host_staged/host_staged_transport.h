// Through pinned host memory, for PCIe boxes without P2P (consumer GPUs whose driver disables
// it): per piece, D2H of the packed slot on the source stream, then H2D on the destination
// stream. Two pinned slots, so piece i+1's D2H overlaps piece i's H2D (PCIe is full duplex).
#pragma once

#include "transport/gpu/staged_transport.h"

namespace tandem {

class HostStagedTransport final : public StagedTransport {
 public:
  HostStagedTransport(const KvPoolView& src, const KvPoolView& dst, size_t slot_bytes);
  ~HostStagedTransport() override;

  std::string_view name() const override { return "host_staged"; }
  TransportCaps caps() const override { return {false, true, true}; }

 protected:
  void move_slot(int slot, size_t bytes) override;

 private:
  unsigned char* pinned_[kSlots] = {};  // [slot_bytes] pinned host, portable to both devices
};

}  // namespace tandem
