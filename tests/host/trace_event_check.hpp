// A validator of Chrome Trace Event JSON (the format Perfetto and
// chrome://tracing read; "Trace Event Format", Google, 2016): the fields each
// phase needs, matched B/E and b/e pairs, X slices with a duration that nest
// on their track, and time that never goes back on a track (a thread's
// events, or one counter). check_trace_events() lists every problem found.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "json_value.hpp"

namespace memlake::test {

inline std::vector<std::string> check_trace_events(const JsonValue& doc) {
  using T = JsonValue::Type;
  std::vector<std::string> problems;
  auto problem = [&](std::size_t i, const std::string& what) {
    if (problems.size() < 20) problems.push_back("event " + std::to_string(i) + ": " + what);
  };
  const JsonValue* events = &doc;
  if (doc.is(T::object)) {
    if (!doc.has("traceEvents") || !doc["traceEvents"].is(T::array))
      return {"no traceEvents array"};
    events = &doc["traceEvents"];
    if (doc.has("displayTimeUnit") && doc["displayTimeUnit"].str() != "ms" &&
        doc["displayTimeUnit"].str() != "ns")
      problems.push_back("displayTimeUnit is neither ms nor ns");
  } else if (!doc.is(T::array)) {
    return {"neither an object nor an array"};
  }
  const std::string phases = "BEXiICMbenstfPONDRc";
  std::map<std::pair<std::int64_t, std::int64_t>, double> last_ts;         // thread track
  std::map<std::pair<std::int64_t, std::string>, double> last_counter_ts;  // counter
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::string>> open_b;
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> open_x;  // ends
  std::map<std::tuple<std::string, std::string>, int> open_async;
  for (std::size_t i = 0; i < events->items.size(); ++i) {
    const JsonValue& e = (*events)[i];
    if (!e.is(T::object)) {
      problem(i, "not an object");
      continue;
    }
    if (!e.has("ph") || !e["ph"].is(T::string) || e["ph"].text.size() != 1 ||
        phases.find(e["ph"].text[0]) == std::string::npos) {
      problem(i, "no valid ph");
      continue;
    }
    const char ph = e["ph"].text[0];
    if (!e.has("pid") || !e["pid"].is(T::number)) problem(i, "no pid");
    if (ph != 'E' && (!e.has("name") || !e["name"].is(T::string))) problem(i, "no name");
    if (e.has("args") && !e["args"].is(T::object)) problem(i, "args is not an object");
    const bool thread_event = ph == 'B' || ph == 'E' || ph == 'X' ||
                              ((ph == 'i' || ph == 'I') && (!e.has("s") || e["s"].text == "t"));
    if ((thread_event || ph == 'M') && (!e.has("tid") || !e["tid"].is(T::number)) &&
        !(ph == 'M' && e.has("name") && e["name"].text.rfind("process_", 0) == 0))
      problem(i, "no tid");
    if (ph == 'M') {
      static const std::set<std::string> kinds = {"process_name", "process_labels",
                                                  "process_sort_index", "thread_name",
                                                  "thread_sort_index"};
      const std::string& n = e.has("name") ? e["name"].text : "";
      if (kinds.count(n) == 0) problem(i, "unknown metadata " + n);
      if (!e.has("args")) {
        problem(i, "metadata without args");
      } else if (n.ends_with("_name") &&
                 (!e["args"].has("name") || !e["args"]["name"].is(T::string))) {
        problem(i, n + " without args.name");
      } else if (n.ends_with("_sort_index") &&
                 (!e["args"].has("sort_index") || !e["args"]["sort_index"].is(T::number))) {
        problem(i, n + " without args.sort_index");
      }
      continue;
    }
    if (!e.has("ts") || !e["ts"].is(T::number) || e["ts"].number < 0) {
      problem(i, "no ts >= 0");
      continue;
    }
    const double ts = e["ts"].number;
    const std::int64_t pid = e.has("pid") ? static_cast<std::int64_t>(e["pid"].number) : 0;
    const std::int64_t tid = e.has("tid") ? static_cast<std::int64_t>(e["tid"].number) : 0;
    if (ph == 'C') {
      if (!e.has("args") || e["args"].members.empty())
        problem(i, "counter without args");
      else
        for (const auto& [k, v] : e["args"].members)
          if (!v.is(T::number)) problem(i, "counter series " + k + " is not a number");
      auto [it, fresh] = last_counter_ts.try_emplace({pid, e["name"].text}, ts);
      if (!fresh && ts < it->second) problem(i, "counter " + e["name"].text + " goes back in time");
      it->second = ts;
      continue;
    }
    if (ph == 'i' || ph == 'I') {
      if (e.has("s") &&
          (e["s"].text.size() != 1 || std::string("gpt").find(e["s"].text) == std::string::npos))
        problem(i, "instant scope is not g, p or t");
    }
    if (ph == 'b' || ph == 'e' || ph == 'n') {
      if (!e.has("id") && !e.has("id2")) problem(i, "async event without id");
      const std::string id =
          e.has("id") ? (e["id"].is(T::string) ? e["id"].text : e["id"].text) : "";
      const std::string cat = e.has("cat") ? e["cat"].text : "";
      if (ph == 'b') ++open_async[{cat, id}];
      if (ph == 'e' && open_async[{cat, id}]-- <= 0) problem(i, "async end without begin");
      continue;
    }
    if (!thread_event) continue;
    const auto track = std::make_pair(pid, tid);
    auto [lt, fresh] = last_ts.try_emplace(track, ts);
    if (!fresh && ts < lt->second) problem(i, "time goes back on its track");
    lt->second = ts;
    auto& xs = open_x[track];
    while (!xs.empty() && xs.back() <= ts) xs.pop_back();
    if (ph == 'X') {
      if (!e.has("dur") || !e["dur"].is(T::number) || e["dur"].number < 0) {
        problem(i, "X without dur >= 0");
        continue;
      }
      const double end = ts + e["dur"].number;
      if (!xs.empty() && end > xs.back() + 1e-9) problem(i, "X overlaps the slice it starts in");
      xs.push_back(end);
    } else if (ph == 'B') {
      open_b[track].push_back(e["name"].text);
    } else if (ph == 'E') {
      auto& stack = open_b[track];
      if (stack.empty()) {
        problem(i, "E without B");
      } else {
        if (e.has("name") && e["name"].text != stack.back()) problem(i, "E names another B");
        stack.pop_back();
      }
    }
  }
  for (const auto& [track, stack] : open_b)
    if (!stack.empty()) problems.push_back("B without E on track " + std::to_string(track.second));
  for (const auto& [key, n] : open_async)
    if (n != 0) problems.push_back("async slice " + std::get<1>(key) + " not ended");
  return problems;
}

}  // namespace memlake::test
