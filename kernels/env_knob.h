// Launch-shape knobs read from the environment, for benchmark sweeps (docs/quantization.md).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace tandem::kernels {

// The value of environment variable `name`, one of `allowed`; `fallback` when unset. Any other
// value aborts, naming the variable and the values it takes.
inline int env_choice(const char* name, std::initializer_list<int> allowed, int fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  std::string list;
  for (int v : allowed) {
    if (std::to_string(v) == env) return v;
    list += (list.empty() ? "" : ", ") + std::to_string(v);
  }
  std::fprintf(stderr, "%s=%s: expected one of %s\n", name, env, list.c_str());
  std::abort();
}

}  // namespace tandem::kernels
