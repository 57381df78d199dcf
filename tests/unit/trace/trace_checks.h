// Structural checks of what `tandem trace` and `tandem metrics` emit, shared by the tests here:
// each returns the list of problems found (empty = valid), so a failure names every defect.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace tandem::testing {

// Chrome Trace Event JSON: parses; every X event has ts and dur >= 0 and a tid that has a
// thread_name; every span of a request lies within its b/e request slice; every flow id has one
// "s" and one "f" (f not before s) and steps between; and `required` span names occur in every
// request.
std::vector<std::string> check_chrome_trace(const std::string& json,
                                            const std::set<std::string>& required);

// The span names (X events, cat "stage") of one request in the trace.
std::set<std::string> span_names(const std::string& json, uint64_t request_id);

// Prometheus text exposition: every line is "# HELP name text", "# TYPE name type" or a sample
// "name{labels} value"; samples follow their TYPE; histogram buckets ascend in le, counts are
// monotone, the +Inf bucket equals _count; `required` metric families are present.
std::vector<std::string> check_prometheus(const std::string& text,
                                          const std::set<std::string>& required);

}  // namespace tandem::testing
