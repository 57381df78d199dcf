// CUDA peer copies between two GPUs (or within one). With peer access (NVLink or PCIe P2P, and
// always on one device) one kernel on the source device reads the source pages and writes the
// destination pages directly: one pass, no staging. Without it (or when forced, for tests) the
// staged pipeline moves each packed piece with one cudaMemcpyPeerAsync, which the driver routes
// through the host.
#pragma once

#include <memory>

#include "transport/gpu/staged_transport.h"

namespace tandem {

class PeerTransport final : public StagedTransport {
 public:
  // direct: write the destination pages from a kernel (needs src -> dst peer access, enabled
  // by make_peer_transport). Otherwise staged through slots of slot_bytes.
  PeerTransport(const KvPoolView& src, const KvPoolView& dst, bool direct, size_t slot_bytes);

  std::string_view name() const override { return "peer"; }
  TransportCaps caps() const override { return {false, true, true}; }
  bool direct() const { return direct_; }

 protected:
  Result<cudaStream_t> enqueue(const ShipOrder& order) override;
  void move_slot(int slot, size_t bytes) override;

 private:
  bool direct_ = false;
  DevicePlanes direct_src_;  // both tables on the source device, where the direct kernel runs
  DevicePlanes direct_dst_;
  bool direct_aligned_ = false;
};

}  // namespace tandem
