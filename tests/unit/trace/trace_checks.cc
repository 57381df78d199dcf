#include "trace_checks.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tandem::testing {

using nlohmann::json;

std::vector<std::string> check_chrome_trace(const std::string& text,
                                            const std::set<std::string>& required) {
  std::vector<std::string> bad;
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return {"not a Chrome trace document (no traceEvents array)"};
  }
  std::set<int> named_tids;
  std::map<uint64_t, std::pair<double, double>> requests;  // id -> [begin, end] in us
  std::map<uint64_t, int> begins, ends;
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      if (!e["args"].value("name", "").empty()) named_tids.insert(e.value("tid", -1));
    }
    if (e.value("cat", "") != "request") continue;
    const uint64_t id = e.value("id", uint64_t(0));
    if (e.value("ph", "") == "b") {
      begins[id]++;
      requests[id].first = e.value("ts", -1.0);
    } else if (e.value("ph", "") == "e") {
      ends[id]++;
      requests[id].second = e.value("ts", -1.0);
    }
  }
  if (named_tids.empty()) bad.push_back("no thread_name metadata");
  for (const auto& [id, r] : requests) {
    if (begins[id] != 1 || ends[id] != 1) {
      bad.push_back("request " + std::to_string(id) + ": not one b and one e event");
    }
    if (r.second < r.first) bad.push_back("request " + std::to_string(id) + " ends before start");
  }
  std::map<uint64_t, std::set<std::string>> names;
  struct Flow {
    int starts = 0, finishes = 0;
    double s_ts = 0, f_ts = 0;
    std::vector<double> steps;
  };
  std::map<uint64_t, Flow> flows;
  constexpr double kSlackUs = 0.002;  // ns -> us doubles
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    const std::string cat = e.value("cat", "");
    if (ph == "X") {
      const std::string name = e.value("name", "");
      if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") ||
          !e["dur"].is_number()) {
        bad.push_back("X event " + name + " without numeric ts/dur");
        continue;
      }
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      if (dur < 0) bad.push_back("X event " + name + " with negative dur");
      if (!named_tids.count(e.value("tid", -1))) {
        bad.push_back("X event " + name + " on a track without a thread_name");
      }
      if (cat != "stage") continue;
      if (!e.contains("args") || !e["args"].contains("request_id")) {
        bad.push_back("span " + name + " without args.request_id");
        continue;
      }
      const uint64_t id = e["args"]["request_id"].get<uint64_t>();
      names[id].insert(name);
      auto it = requests.find(id);
      if (it == requests.end()) {
        bad.push_back("span " + name + " of request " + std::to_string(id) + " with no request");
      } else if (ts < it->second.first - kSlackUs || ts + dur > it->second.second + kSlackUs) {
        std::ostringstream m;
        m.precision(12);
        m << "span " << name << " [" << ts << ", " << ts + dur << "] outside request " << id << " ["
          << it->second.first << ", " << it->second.second << "]";
        bad.push_back(m.str());
      }
    } else if (cat == "flow") {
      Flow& f = flows[e.value("id", uint64_t(0))];
      const double ts = e.value("ts", -1.0);
      if (ph == "s") {
        f.starts++;
        f.s_ts = ts;
      } else if (ph == "f") {
        f.finishes++;
        f.f_ts = ts;
      } else if (ph == "t") {
        f.steps.push_back(ts);
      } else {
        bad.push_back("flow event with ph " + ph);
      }
    }
  }
  for (const auto& [id, f] : flows) {
    const std::string who = "flow " + std::to_string(id);
    if (f.starts != 1 || f.finishes != 1) {
      bad.push_back(who + ": " + std::to_string(f.starts) + " starts, " +
                    std::to_string(f.finishes) + " finishes");
      continue;
    }
    if (f.f_ts < f.s_ts) bad.push_back(who + " finishes before it starts");
    for (double t : f.steps) {
      if (t < f.s_ts || t > f.f_ts) bad.push_back(who + " has a step outside [s, f]");
    }
  }
  if (requests.empty()) bad.push_back("no requests in the trace");
  for (const auto& [id, r] : requests) {
    for (const std::string& want : required) {
      if (!names[id].count(want)) {
        bad.push_back("request " + std::to_string(id) + " has no " + want + " span");
      }
    }
  }
  return bad;
}

std::set<std::string> span_names(const std::string& text, uint64_t request_id) {
  std::set<std::string> out;
  const json doc = json::parse(text);
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "X" && e.value("cat", "") == "stage" &&
        e["args"].value("request_id", uint64_t(0)) == request_id) {
      out.insert(e.value("name", ""));
    }
  }
  return out;
}

namespace {

double parse_value(const std::string& v) {
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  return std::strtod(v.c_str(), nullptr);
}

}  // namespace

std::vector<std::string> check_prometheus(const std::string& text,
                                          const std::set<std::string>& required) {
  static const std::regex help(R"re(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$)re");
  static const std::regex type(
      R"re(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)re");
  static const std::regex sample(
      R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? ([-+]?([0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|Inf)|NaN)$)re");
  static const std::regex le_label(R"re(le="([^"]*)")re");
  std::vector<std::string> bad;
  std::set<std::string> families;
  std::string family, family_type;
  struct Hist {
    std::vector<std::pair<double, double>> buckets;  // (le, count) in order
    double count = -1;
  };
  std::map<std::string, Hist> hists;  // by family + labels without le
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string at = "line " + std::to_string(n) + " '" + line + "'";
    std::smatch m;
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      family = m[1];
      family_type = m[2];
      if (!families.insert(family).second) bad.push_back(at + ": family typed twice");
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      bad.push_back(at + ": not a HELP, TYPE or sample line");
      continue;
    }
    const std::string name = m[1], labels = m[3], value = m[5];
    const double v = parse_value(value);
    if (family_type == "histogram") {
      std::string suffix;
      for (const char* s : {"_bucket", "_sum", "_count"}) {
        if (name == family + s) suffix = s;
      }
      if (suffix.empty()) {
        bad.push_back(at + ": sample outside its family " + family);
        continue;
      }
      std::smatch le;
      const std::string rest = std::regex_replace(labels, le_label, "");
      Hist& h = hists[family + "{" + rest + "}"];
      if (suffix == "_bucket") {
        if (!std::regex_search(labels, le, le_label)) {
          bad.push_back(at + ": bucket without le");
          continue;
        }
        h.buckets.push_back({parse_value(le[1]), v});
      } else if (suffix == "_count") {
        h.count = v;
      }
    } else if (name != family) {
      bad.push_back(at + ": sample outside its family " + family);
    } else if (family_type == "counter" && !(v >= 0)) {
      bad.push_back(at + ": negative counter");
    }
  }
  for (const auto& [key, h] : hists) {
    if (h.buckets.empty() || !std::isinf(h.buckets.back().first)) {
      bad.push_back(key + ": no +Inf bucket last");
      continue;
    }
    for (size_t i = 1; i < h.buckets.size(); ++i) {
      if (!(h.buckets[i].first > h.buckets[i - 1].first)) {
        bad.push_back(key + ": le not ascending");
      }
      if (h.buckets[i].second < h.buckets[i - 1].second) {
        bad.push_back(key + ": bucket counts not monotone");
      }
    }
    if (h.buckets.back().second != h.count) bad.push_back(key + ": +Inf bucket != _count");
  }
  for (const std::string& want : required) {
    if (!families.count(want)) bad.push_back("no metric family " + want);
  }
  return bad;
}

}  // namespace tandem::testing
