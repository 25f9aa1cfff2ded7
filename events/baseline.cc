#include "events/baseline.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/work_pool.h"

namespace tbfs::events {

namespace {

using nlohmann::json;

constexpr char kFormat[] = "tbfs-baseline";
constexpr int kVersion = 1;

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

bool ParseHex(const json& j, uint64_t* out) {
  if (!j.is_string()) return false;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.size() != 16) return false;
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 16);
  return end == s.c_str() + 16;
}

json ScalarToJson(const ScalarValue& v) {
  return v.is_integer ? json{{"i", v.i}} : json{{"f", v.f}};
}

// Region [start, end) holding the first byte where `now` differs from
// `before`, from their content checkpoints.
uint64_t FirstChangedRegion(const FileDigest& before, const FileDigest& now) {
  uint64_t start = 0;
  size_t n = std::min(before.checkpoints.size(), now.checkpoints.size());
  for (size_t i = 0; i < n; ++i) {
    if (before.checkpoints[i].offset != now.checkpoints[i].offset ||
        before.checkpoints[i].hash != now.checkpoints[i].hash) {
      break;
    }
    start = before.checkpoints[i].offset;
  }
  return start;
}

}  // namespace

std::string Failure::ToString() const {
  std::string s = "run " + run;
  if (!tag.empty()) s += ", tag " + tag;
  s += ", file " + file + ", offset " + std::to_string(offset) + ": " + reason;
  return s;
}

std::string BaselineToJson(const std::vector<FileDigest>& files) {
  json doc{{"format", kFormat}, {"version", kVersion}};
  json& jfiles = doc["files"] = json::array();
  for (const FileDigest& f : files) {
    json jf{{"path", f.path},
            {"offset_bytes", f.offset_bytes},
            {"records", f.records},
            {"content_hash", Hex(f.content_hash)},
            {"other_bytes", f.other_bytes}};
    json& cps = jf["checkpoints"] = json::array();
    for (const Checkpoint& c : f.checkpoints) cps.push_back({c.offset, Hex(c.hash)});
    json& tags = jf["tags"] = json::object();
    for (const auto& [name, t] : f.tags) {
      json jt{{"plugin", t.plugin},       {"count", t.count},    {"first_step", t.first_step},
              {"last_step", t.last_step}, {"hash", Hex(t.hash)}, {"record_bytes", t.record_bytes}};
      if (t.last_scalar) jt["last_scalar"] = ScalarToJson(*t.last_scalar);
      tags[name] = std::move(jt);
    }
    jfiles.push_back(std::move(jf));
  }
  return doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<std::vector<FileDigest>> BaselineFromJson(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::InvalidArgument("baseline is not a JSON document");
  }
  if (doc.value("format", "") != kFormat) {
    return Status::InvalidArgument("not a tbfs baseline (format field missing or different)");
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != kVersion) {
    return Status::NotSupported("baseline version is not " + std::to_string(kVersion));
  }
  if (!doc.contains("files") || !doc["files"].is_array()) {
    return Status::InvalidArgument("baseline has no files array");
  }
  std::vector<FileDigest> files;
  try {
    for (const json& jf : doc["files"]) {
      FileDigest f;
      f.path = jf.at("path").get<std::string>();
      f.offset_bytes = jf.at("offset_bytes").get<uint64_t>();
      f.records = jf.at("records").get<uint64_t>();
      f.other_bytes = jf.at("other_bytes").get<uint64_t>();
      if (!ParseHex(jf.at("content_hash"), &f.content_hash)) {
        return Status::InvalidArgument("baseline: bad content_hash for " + f.path);
      }
      for (const json& c : jf.at("checkpoints")) {
        Checkpoint cp;
        cp.offset = c.at(0).get<uint64_t>();
        if (!ParseHex(c.at(1), &cp.hash)) {
          return Status::InvalidArgument("baseline: bad checkpoint for " + f.path);
        }
        f.checkpoints.push_back(cp);
      }
      for (const auto& [name, jt] : jf.at("tags").items()) {
        TagDigest t;
        t.plugin = jt.at("plugin").get<std::string>();
        t.count = jt.at("count").get<uint64_t>();
        t.first_step = jt.at("first_step").get<int64_t>();
        t.last_step = jt.at("last_step").get<int64_t>();
        t.record_bytes = jt.at("record_bytes").get<uint64_t>();
        if (!ParseHex(jt.at("hash"), &t.hash)) {
          return Status::InvalidArgument("baseline: bad hash for tag " + name);
        }
        if (jt.contains("last_scalar")) {
          const json& s = jt["last_scalar"];
          ScalarValue v;
          if (s.contains("i")) {
            v.is_integer = true;
            v.i = s["i"].get<int64_t>();
          } else {
            v.f = s.at("f").get<double>();
          }
          t.last_scalar = v;
        }
        f.tags.emplace(name, std::move(t));
      }
      if (!IsSafeRelativePath(f.path)) {
        return Status::InvalidArgument("baseline: bad file path '" + f.path + "'");
      }
      files.push_back(std::move(f));
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("baseline: malformed entry: ") + e.what());
  }
  return files;
}

std::vector<Failure> CompareFileDigests(const FileDigest& before, const FileDigest& now) {
  std::vector<Failure> out;
  std::string run = RunOf(before.path);
  if (now.offset_bytes == before.offset_bytes && now.content_hash == before.content_hash) {
    return out;
  }
  uint64_t region = FirstChangedRegion(before, now);
  if (now.offset_bytes != before.offset_bytes) {
    out.push_back({run, "", before.path, now.offset_bytes,
                   "records no longer end at offset " + std::to_string(before.offset_bytes) +
                       " (the file was rewritten)"});
  }
  for (const auto& [name, tb] : before.tags) {
    auto it = now.tags.find(name);
    if (it == now.tags.end()) {
      out.push_back(
          {run, name, before.path, region, "all " + std::to_string(tb.count) + " values are gone"});
    } else if (it->second.count != tb.count) {
      out.push_back({run, name, before.path, region,
                     std::to_string(it->second.count) + " values where the baseline has " +
                         std::to_string(tb.count)});
    } else if (!it->second.SameValues(tb)) {
      out.push_back({run, name, before.path, region, "values differ from the baseline"});
    }
  }
  for (const auto& [name, tn] : now.tags) {
    if (!before.tags.count(name)) {
      out.push_back({run, name, before.path, region, "tag appears inside the baseline's records"});
    }
  }
  if (out.empty()) {
    out.push_back({run, "", before.path, region, "bytes changed outside the summary values"});
  }
  return out;
}

std::vector<Failure> CheckBaseline(const std::string& logdir,
                                   const std::vector<FileDigest>& baseline, int threads) {
  std::vector<std::vector<Failure>> per_file(baseline.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < baseline.size(); i = next.fetch_add(1)) {
      const FileDigest& before = baseline[i];
      std::string path = JoinPath(logdir, before.path);
      std::string run = RunOf(before.path);
      struct stat st;
      auto fd = OpenUnder(logdir, before.path, O_PATH);
      if (!fd.ok() || ::fstat(fd->get(), &st) != 0) {
        const Status why = fd.ok() ? Status::FromErrno(errno, "stat", path) : fd.status();
        per_file[i].push_back({run, "", before.path, 0,
                               why.IsNotFound() ? "file is gone" : why.message(),
                               why.code() == Code::kIOError});
        continue;
      }
      if (static_cast<uint64_t>(st.st_size) < before.offset_bytes) {
        per_file[i].push_back({run, "", before.path, static_cast<uint64_t>(st.st_size),
                               "file truncated to " + std::to_string(st.st_size) +
                                   " bytes; the baseline covers " +
                                   std::to_string(before.offset_bytes)});
        continue;
      }
      FileDigest now;
      Status s = DigestFile(logdir, before.path, &now, before.offset_bytes);
      if (!s.ok()) {
        per_file[i].push_back(
            {run, "", before.path, now.offset_bytes, s.message(), s.code() == Code::kIOError});
        continue;
      }
      per_file[i] = CompareFileDigests(before, now);
    }
  };
  unsigned n = threads > 0 ? static_cast<unsigned>(threads)
                           : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  StartThreads(
      std::min<size_t>(n, std::max<size_t>(baseline.size(), 1)) - 1, "verifier",
      [&](size_t) { work(); }, &pool);
  work();
  for (auto& t : pool) t.join();

  std::vector<Failure> out;
  for (auto& v : per_file) out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<Failure> CheckMustHave(const LogdirDigest& digest,
                                   const std::vector<std::string>& must_have) {
  std::vector<Failure> out;
  for (const std::string& tag : must_have) {
    bool found = false;
    for (const auto& [name, run] : digest.runs) {
      if (run.tags.count(tag)) {
        found = true;
        break;
      }
    }
    if (!found) out.push_back({"*", tag, "", 0, "must-have tag is in no run"});
  }
  return out;
}

}  // namespace tbfs::events
