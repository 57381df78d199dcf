// NCCL send/recv between the two GPUs of this process: ncclCommInitAll builds both ranks'
// communicators in-process (no TCP port, no bootstrap server); each packed piece is one
// ncclSend on the source stream and one ncclRecv on the destination stream in one group.
#pragma once

#include <nccl.h>

#include "transport/gpu/staged_transport.h"

namespace tandem {

class NcclTransport final : public StagedTransport {
 public:
  // Two different devices (checked by make_nccl_transport); aborts on NCCL errors at setup.
  NcclTransport(const KvPoolView& src, const KvPoolView& dst, size_t slot_bytes);
  ~NcclTransport() override;

  std::string_view name() const override { return "nccl"; }
  TransportCaps caps() const override { return {false, true, false}; }

 protected:
  void move_slot(int slot, size_t bytes) override;

 private:
  ncclComm_t comms_[2] = {};  // rank 0 on the source device, rank 1 on the destination
};

}  // namespace tandem
