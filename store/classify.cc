#include "store/classify.h"

#include "events/logdir_digest.h"
#include "store/glob.h"

namespace tbfs::store {

namespace {

constexpr std::pair<FileClass, std::string_view> kNames[] = {
    {FileClass::kEvents, "tfevents"},
    {FileClass::kTfProfile, "tf_profile"},
    {FileClass::kPytorchTrace, "pytorch_trace"},
    {FileClass::kOtherTrace, "other_trace"},
    {FileClass::kOther, "other"},
};

bool AnyGlob(const std::vector<std::string>& globs, std::string_view path) {
  for (const std::string& g : globs) {
    if (GlobMatch(g, path)) return true;
  }
  return false;
}

bool AnyMarker(const std::vector<std::string>& markers, std::string_view path) {
  for (const std::string& m : markers) {
    if (MarkerMatches(m, path)) return true;
  }
  return false;
}

}  // namespace

std::string_view ClassName(FileClass c) {
  for (const auto& [cls, name] : kNames) {
    if (cls == c) return name;
  }
  return "other";
}

bool ParseClassName(std::string_view name, FileClass* out) {
  for (const auto& [cls, n] : kNames) {
    if (n == name) {
      *out = cls;
      return true;
    }
  }
  return false;
}

bool MarkerMatches(std::string_view marker, std::string_view rel_path) {
  if (marker.empty()) return false;
  if (!HasGlobChars(marker)) return rel_path.find(marker) != std::string_view::npos;
  if (marker.find('/') == std::string_view::npos) {
    size_t slash = rel_path.find_last_of('/');
    std::string_view name = slash == std::string_view::npos ? rel_path : rel_path.substr(slash + 1);
    return GlobMatch(marker, name);
  }
  return GlobMatch(marker, rel_path);
}

FileClass Policy::Classify(std::string_view rel_path) const {
  // I1: checked first, and nothing below can override it.
  if (events::IsEventsFileName(rel_path)) return FileClass::kEvents;
  if (AnyGlob(tf_profile_globs, rel_path)) return FileClass::kTfProfile;
  if (AnyGlob(pytorch_globs, rel_path)) return FileClass::kPytorchTrace;
  if (AnyGlob(other_trace_globs, rel_path) || AnyMarker(trace_markers, rel_path)) {
    return FileClass::kOtherTrace;
  }
  return FileClass::kOther;
}

bool Policy::IsProtected(std::string_view rel_path) const {
  return events::IsEventsFileName(rel_path) || AnyMarker(protected_markers, rel_path);
}

}  // namespace tbfs::store
