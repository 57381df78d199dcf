// Picks the KV transport between two stages: `auto` probes what the two pools allow (host pools:
// local; GPU pools: peer, nccl, host_staged in that order of preference where available), a
// name forces one, and an impossible choice is an error naming --kv-transport.
#pragma once

#include <memory>
#include <string_view>

#include "core/error.h"
#include "transport/kv_transport.h"

namespace tandem {

Result<std::unique_ptr<KvTransport>> make_transport(std::string_view name, const KvPoolView& src,
                                                    const KvPoolView& dst);

}  // namespace tandem
