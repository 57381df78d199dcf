// The clock samples of benchmarks/gpu_clocks.h and where they go in the latency JSON: NVML's
// reason bits by name, no samples (and no JSON key) without a GPU.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "gpu_clocks.h"
#include "latency.h"

using namespace tandem;
using namespace tandem::bench;

TEST_CASE("clock event reasons by name, unknown bits in hex") {
  CHECK(clock_reason_names(0) == "none");
  CHECK(clock_reason_names(0x4) == "sw_power_cap");
  CHECK(clock_reason_names(0x1 | 0x4) == "gpu_idle,sw_power_cap");
  CHECK(clock_reason_names(0x8 | 0x40 | 0x80) == "hw_slowdown,hw_thermal,hw_power_brake");
  CHECK(clock_reason_names(0x200) == "0x200");
  CHECK(clock_reason_names(0x4 | 0x1000) == "sw_power_cap,0x1000");
}

TEST_CASE("a sampler with no GPU to ask samples nothing") {
  ClockSampler none("");
  CHECK(none.stop().samples == 0);
  // No such bus (or no NVML at all, as on CI): nothing either, and stop() twice is harmless.
  ClockSampler bogus("00000000:FF:1F.7");
  CHECK(bogus.stop().samples == 0);
  CHECK(bogus.stop().samples == 0);
}

TEST_CASE("latency JSON: clock objects only where there were samples") {
  LatencyOptions o;
  LatencyResult r;
  r.ttft_ms = 46.0;
  r.tpot_ms = 5.7;
  auto plain = nlohmann::json::parse(to_json(o, r, "m"));
  CHECK(plain["ttft_ms"].get<double>() == doctest::Approx(46.0));
  CHECK_FALSE(plain.contains("prefill_clocks"));
  CHECK_FALSE(plain.contains("decode_clocks"));
  CHECK(clock_stats_json("decode_clocks", r.decode_clocks).empty());

  r.decode_clocks = ClockStats{120, 1365, 1530.4, 1980, 886.6, 0x4 | 0x1};
  auto with = nlohmann::json::parse(to_json(o, r, "m"));
  CHECK_FALSE(with.contains("prefill_clocks"));
  REQUIRE(with.contains("decode_clocks"));
  const auto& d = with["decode_clocks"];
  CHECK(d["samples"].get<int>() == 120);
  CHECK(d["sm_mhz_min"].get<double>() == 1365);
  CHECK(d["sm_mhz_mean"].get<double>() == 1530);
  CHECK(d["sm_mhz_max"].get<double>() == 1980);
  CHECK(d["power_w_max"].get<double>() == doctest::Approx(886.6));
  CHECK(d["reasons"].get<std::string>() == "gpu_idle,sw_power_cap");
}
