// Trace-like content for the store's tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "fmt/format.h"

namespace tbfs::store {

// Chrome-trace JSON as the PyTorch profiler writes it: the same few dozen
// names, categories and keys in every event, the numbers varying.
inline std::string TraceJson(size_t n, uint32_t seed) {
  static const char* kNames[] = {"aten::conv2d",       "aten::convolution", "aten::relu",
                                 "aten::add_",         "aten::empty",       "cudaLaunchKernel",
                                 "aten::batch_norm",   "aten::max_pool2d",  "cudaMemcpyAsync",
                                 "Optimizer.step#SGD", "aten::linear",      "aten::addmm"};
  static const char* kCats[] = {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy"};
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::string s = "{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [\n";
  uint64_t ts = 1623143089861000 + seed;
  while (s.size() < n) {
    ts += next() % 400;
    s += fmt::format(
        "  {{\"ph\": \"X\", \"cat\": \"{}\", \"name\": \"{}\", \"pid\": {}, \"tid\": {}, "
        "\"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {}, \"Sequence number\": {}, "
        "\"Fwd thread id\": 0}}}},\n",
        kCats[next() % 4], kNames[next() % 12], 2113 + next() % 2, 2113 + next() % 3, ts,
        next() % 2000, next() % 100000, next() % 50000);
  }
  s.resize(n);
  return s;
}

// Trace JSON of another model and profiler build: other operator names,
// categories and argument keys in the same layout.
inline std::string OtherModelJson(size_t n, uint32_t seed) {
  std::string s = TraceJson(n + n / 2, seed);
  const std::pair<std::string, std::string> kRenames[] = {
      {"aten::", "xla::fused_computation_"},
      {"cudaLaunchKernel", "hipModuleLaunchKernel"},
      {"cudaMemcpyAsync", "hipMemcpyWithStream"},
      {"cpu_op", "host_op"},
      {"cuda_runtime", "hip_runtime"},
      {"External id", "correlation"},
      {"Sequence number", "seq_no"},
      {"Fwd thread id", "forward_tid"},
      {"Optimizer.step#SGD", "Optimizer.step#AdamW"}};
  for (const auto& [from, to] : kRenames) {
    std::string out;
    size_t at = 0, hit;
    while ((hit = s.find(from, at)) != std::string::npos) {
      out.append(s, at, hit - at).append(to);
      at = hit + from.size();
    }
    s = out.append(s, at);
  }
  s.resize(n);
  return s;
}

// `json` with every number after a key quoted ("ts": "1623142623482433"):
// content whose numbers the store cannot write as differences
// (store/number_deltas.h), for tests of what dictionaries do without them.
inline std::string QuotedNumbers(const std::string& json) {
  std::string out;
  out.reserve(json.size() + json.size() / 8);
  for (size_t i = 0; i < json.size();) {
    const bool value =
        i >= 2 && json[i - 2] == ':' && json[i - 1] == ' ' && json[i] >= '0' && json[i] <= '9';
    if (!value) {
      out.push_back(json[i++]);
      continue;
    }
    out.push_back('"');
    while (i < json.size() && ((json[i] >= '0' && json[i] <= '9') || json[i] == '.')) {
      out.push_back(json[i++]);
    }
    out.push_back('"');
  }
  return out;
}

}  // namespace tbfs::store
