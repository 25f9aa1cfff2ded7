// Writes the tfevents side of generated runs, the way PyTorch's
// SummaryWriter and Keras' TensorBoard callback write them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/fs_util.h"
#include "events/proto/tfevents.pb.h"
#include "events/record.h"
#include "fmt/format.h"
#include "tools/gen/gen_internal.h"

namespace tbfs::gen {

namespace {

using events::AppendFramedRecord;

// One tfevents file being written.
class EventFile {
 public:
  explicit EventFile(Ctx& ctx) : ctx_(ctx), sink_(ctx.progress) {}

  Status Open(const std::string& rel_path, double wall_time) {
    std::string path = JoinPath(ctx_.logdir, rel_path);
    TBFS_RETURN_IF_ERROR(MakeDirs(ParentPath(path)));
    TBFS_RETURN_IF_ERROR(sink_.Open(path));
    pb::Event first;
    first.set_wall_time(wall_time);
    first.set_file_version("brain.Event:2");
    Write(first);
    return Status::OK();
  }
  void Write(const pb::Event& event) {
    event.SerializeToString(&scratch_);
    AppendFramedRecord(scratch_, &sink_.buffer());
    sink_.Pump();
  }
  // Writes only the first `keep` bytes of the framed event: a writer that
  // has not finished its last record.
  void WritePartial(const pb::Event& event, size_t keep) {
    event.SerializeToString(&scratch_);
    std::string framed;
    AppendFramedRecord(scratch_, &framed);
    sink_.Write(std::string_view(framed).substr(0, std::min(keep, framed.size() - 1)));
  }
  Status Close() {
    uint64_t bytes = sink_.size();
    TBFS_RETURN_IF_ERROR(sink_.Close());
    ctx_.CountEvents(bytes);
    return Status::OK();
  }

 private:
  Ctx& ctx_;
  FileSink sink_;
  std::string scratch_;
};

pb::Event NewEvent(double wall_time, int64_t step) {
  pb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  return e;
}

pb::SummaryMetadata PluginMetadata(const std::string& plugin, const std::string& content,
                                   int data_class) {
  pb::SummaryMetadata md;
  md.mutable_plugin_data()->set_plugin_name(plugin);
  md.mutable_plugin_data()->set_content(content);
  md.set_data_class(data_class);
  return md;
}

// Training curves: t in [0, 1] is training progress.
double LossCurve(double t, Rng& rng, double floor) {
  return floor + 2.25 * std::exp(-4.0 * t) + 0.03 * rng.Gauss() * (0.3 + std::exp(-2.0 * t));
}
double LrSchedule(double t) { return 0.1 * 0.5 * (1.0 + std::cos(M_PI * t)) + 1e-5; }

// TensorFlow's default histogram edges: +-1e-12 * 1.1^k, and 0.
const std::vector<double>& DefaultEdges() {
  static const std::vector<double> edges = [] {
    std::vector<double> pos;
    for (double v = 1e-12; v < 1e20; v *= 1.1) pos.push_back(v);
    std::vector<double> all;
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return edges;
}

// A HistogramProto as PyTorch's add_histogram writes it (default bins,
// empty buckets at either end trimmed).
pb::HistogramProto MakeHistogram(Rng& rng, double sigma, double mean) {
  const auto& edges = DefaultEdges();
  std::vector<uint32_t> counts(edges.size() + 1, 0);
  pb::HistogramProto h;
  double mn = INFINITY, mx = -INFINITY, sum = 0, sq = 0;
  const int n = 384;
  for (int i = 0; i < n; ++i) {
    double v = mean + sigma * rng.Gauss();
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    sum += v;
    sq += v * v;
    counts[std::lower_bound(edges.begin(), edges.end(), v) - edges.begin()]++;
  }
  size_t first = 0, last = counts.size() - 1;
  while (first < last && counts[first] == 0) ++first;
  while (last > first && counts[last] == 0) --last;
  h.set_min(mn);
  h.set_max(mx);
  h.set_num(n);
  h.set_sum(sum);
  h.set_sum_squares(sq);
  for (size_t i = first; i <= last; ++i) {
    h.add_bucket_limit(i < edges.size() ? edges[i] : 1.7976931348623157e308);
    h.add_bucket(counts[i]);
  }
  return h;
}

std::string MakeImage(Rng& rng, int size) {
  std::string rgb(static_cast<size_t>(size) * size * 3, '\0');
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      size_t i = (static_cast<size_t>(y) * size + x) * 3;
      rgb[i] = static_cast<char>(x * 255 / size);
      rgb[i + 1] = static_cast<char>(y * 255 / size);
      rgb[i + 2] = static_cast<char>(rng.Below(256));
    }
  }
  return EncodePng(size, size, rgb);
}

std::string Fixed32LE(float v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}
std::string Fixed64LE(double v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A 0-d tensor value written the TF2 way (tensor_content).
void SetTensorScalar(pb::Summary::Value* v, pb::DataType dtype, const std::string& content) {
  pb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(dtype);
  t->mutable_tensor_shape();
  t->set_tensor_content(content);
}

// A kernel's histogram as Keras writes it: a [k, 3] double tensor (left,
// right, count) whose spread grows with training (t in [0, 1]).
void SetKernelHistogram(pb::Summary::Value* v, Rng& rng, double t) {
  const int k = 30;
  std::string content;
  double lo = -0.2 - 0.05 * t, width = (0.4 + 0.1 * t) / k;
  for (int b = 0; b < k; ++b) {
    double left = lo + b * width;
    double center = (b - k / 2.0) / (k / 6.0);
    double count = std::round(1000.0 * std::exp(-0.5 * center * center) + rng.Below(8));
    content += Fixed64LE(left) + Fixed64LE(left + width) + Fixed64LE(count);
  }
  pb::TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(pb::DT_DOUBLE);
  tensor->mutable_tensor_shape()->add_dim()->set_size(k);
  tensor->mutable_tensor_shape()->add_dim()->set_size(3);
  tensor->set_tensor_content(content);
}

}  // namespace

namespace {

// add_hparams writes a sub-run named by the time.
Status WriteHparamsRun(Ctx& ctx, const std::string& run, double wall, int pid, double floor) {
  EventFile hp(ctx);
  TBFS_RETURN_IF_ERROR(hp.Open(fmt::format("{}/{:.7f}/events.out.tfevents.{}.{}.{}.1", run, wall,
                                           static_cast<int64_t>(wall), ctx.host, pid),
                               wall));
  // HParamsPluginData with its experiment (2), session_start_info (3) and
  // session_end_info (4, status SUCCESS) fields, as the hparams plugin reads.
  const std::pair<const char*, std::string> hparams[] = {
      {"_hparams_/experiment", std::string("\x12\x00", 2)},
      {"_hparams_/session_start_info", std::string("\x1a\x00", 2)},
      {"_hparams_/session_end_info", std::string("\x22\x02\x08\x01", 4)},
  };
  for (const auto& [tag, content] : hparams) {
    pb::Event e = NewEvent(wall, 0);
    auto* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    *v->mutable_metadata() = PluginMetadata("hparams", content, 0);
    hp.Write(e);
  }
  pb::Event final_loss = NewEvent(wall, 0);
  auto* fl = final_loss.mutable_summary()->add_value();
  fl->set_tag("hparam/final_loss");
  fl->set_simple_value(static_cast<float>(floor));
  hp.Write(final_loss);
  TBFS_RETURN_IF_ERROR(hp.Close());

  return Status::OK();
}

// The profiler ran for a few steps early in training.
Status WritePytorchTraces(Ctx& ctx, const std::string& run, Rng& rng, uint64_t trace_bytes,
                          double start, int pid) {
  if (trace_bytes == 0) return Status::OK();
  int64_t ns = static_cast<int64_t>(start * 1e9) + rng.Range(0, 999'999'999);
  std::string worker = fmt::format("{}_{}", ctx.host, pid);
  bool gz = ctx.options.gzip_pytorch;
  uint64_t json_share = gz ? trace_bytes * 85 / 100 : trace_bytes;
  const int files = 2;
  for (int i = 0; i < files; ++i) {
    std::string path =
        fmt::format("{}/{}/{}.{}.pt.trace.json", ctx.logdir, run, worker, ns + i * 1'500'000'000LL);
    TBFS_RETURN_IF_ERROR(
        WriteKinetoTrace(ctx, path, rng, json_share / files, start + 10 + 2 * i, false));
  }
  if (gz) {
    std::string path = fmt::format("{}/{}/{}.{}.pt.trace.json.gz", ctx.logdir, run, worker,
                                   ns + files * 1'500'000'000LL);
    TBFS_RETURN_IF_ERROR(
        WriteKinetoTrace(ctx, path, rng, trace_bytes - json_share, start + 20, true));
  }
  return Status::OK();
}

}  // namespace

Status WritePytorchRun(Ctx& ctx, const std::string& run, Rng& rng, uint64_t trace_bytes,
                       bool live_tail) {
  const int steps = std::max(1, ctx.options.steps);
  double wall = ctx.base_time + static_cast<double>(rng.Range(0, 3600));
  const double start = wall;
  const int pid = ctx.pid + static_cast<int>(rng.Below(5000));
  EventFile file(ctx);
  TBFS_RETURN_IF_ERROR(file.Open(fmt::format("{}/events.out.tfevents.{}.{}.{}.0", run,
                                             static_cast<int64_t>(wall), ctx.host, pid),
                                 wall));

  const double floor = 0.02 + 0.1 * rng.Unit();
  std::string image = MakeImage(rng, 48);
  for (int step = 0; step < steps; ++step) {
    const double t = static_cast<double>(step) / steps;
    wall += 0.2 + 0.05 * rng.Unit();
    auto scalar = [&](const char* tag, double value) {
      pb::Event e = NewEvent(wall, step);
      auto* v = e.mutable_summary()->add_value();
      v->set_tag(tag);
      v->set_simple_value(static_cast<float>(value));
      file.Write(e);
    };
    scalar("loss/train", LossCurve(t, rng, floor));
    scalar("lr", LrSchedule(t));
    scalar("throughput/samples_per_sec", 2400.0 + 60.0 * rng.Gauss());
    if (step % 10 == 0) {
      scalar("loss/val", LossCurve(t, rng, floor * 1.3) + 0.02);
      scalar("accuracy/val",
             std::min(0.999, 0.1 + 0.85 * (1.0 - std::exp(-5.0 * t)) + 0.005 * rng.Gauss()));
    }
    if (step % 50 == 0) {
      const char* tags[] = {"weights/conv1", "weights/fc1", "grads/fc1"};
      double sigmas[] = {0.05 + 0.02 * t, 0.02 + 0.01 * t, 0.002 * (1.0 - 0.8 * t)};
      for (int k = 0; k < 3; ++k) {
        pb::Event e = NewEvent(wall, step);
        auto* v = e.mutable_summary()->add_value();
        v->set_tag(tags[k]);
        *v->mutable_histo() = MakeHistogram(rng, sigmas[k], 0.0);
        file.Write(e);
      }
    }
    if (step == 0 || step == steps / 2 || step == steps - 1) {
      pb::Event e = NewEvent(wall, step);
      auto* v = e.mutable_summary()->add_value();
      v->set_tag("samples/input");
      v->mutable_image()->set_height(48);
      v->mutable_image()->set_width(48);
      v->mutable_image()->set_colorspace(3);
      v->mutable_image()->set_encoded_image_string(image);
      file.Write(e);
    }
    if (step == 0) {
      pb::Event e = NewEvent(wall, step);
      auto* v = e.mutable_summary()->add_value();
      v->set_tag("notes/text_summary");
      *v->mutable_metadata() = PluginMetadata("text", std::string(), 0);
      pb::TensorProto* tensor = v->mutable_tensor();
      tensor->set_dtype(pb::DT_STRING);
      tensor->mutable_tensor_shape()->add_dim()->set_size(1);
      tensor->add_string_val(fmt::format("run {} on {}: resnet50, batch 256, SGD", run, ctx.host));
      file.Write(e);
    }
  }
  if (live_tail) {
    pb::Event e = NewEvent(wall + 0.25, steps);
    auto* v = e.mutable_summary()->add_value();
    v->set_tag("loss/train");
    v->set_simple_value(0.5f);
    file.WritePartial(e, 19);
  }
  TBFS_RETURN_IF_ERROR(file.Close());

  TBFS_RETURN_IF_ERROR(WriteHparamsRun(ctx, run, wall, pid, floor));
  return WritePytorchTraces(ctx, run, rng, trace_bytes, start, pid);
}

Status WriteKerasRun(Ctx& ctx, const std::string& run, Rng& rng, uint64_t trace_bytes) {
  const int steps = std::max(1, ctx.options.steps);
  const int steps_per_epoch = 100;
  double wall = ctx.base_time + static_cast<double>(rng.Range(0, 3600));
  const double start = wall;
  const int pid = ctx.pid + static_cast<int>(rng.Below(5000));
  const auto ts = static_cast<int64_t>(wall);
  EventFile train(ctx), val(ctx);
  TBFS_RETURN_IF_ERROR(train.Open(
      fmt::format("{}/train/events.out.tfevents.{}.{}.{}.0.v2", run, ts, ctx.host, pid), wall));
  TBFS_RETURN_IF_ERROR(val.Open(
      fmt::format("{}/validation/events.out.tfevents.{}.{}.{}.1.v2", run, ts, ctx.host, pid),
      wall));

  // TF2 writers send the metadata with the first value of each tag only.
  std::vector<std::string> seen;
  auto first_time = [&](const std::string& key) {
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return false;
    seen.push_back(key);
    return true;
  };
  auto tensor_scalar = [&](EventFile& f, const char* which, const char* tag, int64_t step,
                           pb::DataType dtype, const std::string& content) {
    pb::Event e = NewEvent(wall, step);
    auto* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    if (first_time(std::string(which) + tag)) {
      *v->mutable_metadata() = PluginMetadata("scalars", std::string(), 1);
    }
    SetTensorScalar(v, dtype, content);
    f.Write(e);
  };

  const double floor = 0.05 + 0.1 * rng.Unit();
  std::string image = MakeImage(rng, 32);
  for (int step = 0; step < steps; ++step) {
    const double t = static_cast<double>(step) / steps;
    wall += 0.1 + 0.03 * rng.Unit();
    tensor_scalar(train, "train", "batch_loss", step, pb::DT_FLOAT,
                  Fixed32LE(static_cast<float>(LossCurve(t, rng, floor))));
    tensor_scalar(train, "train", "global_norm", step, pb::DT_DOUBLE,
                  Fixed64LE(1.0 + 4.0 * std::exp(-3.0 * t) + 0.1 * rng.Gauss()));
    if ((step + 1) % steps_per_epoch == 0 || step == steps - 1) {
      const int64_t epoch = step / steps_per_epoch;
      tensor_scalar(train, "train", "epoch_loss", epoch, pb::DT_FLOAT,
                    Fixed32LE(static_cast<float>(LossCurve(t, rng, floor))));
      tensor_scalar(train, "train", "epoch_accuracy", epoch, pb::DT_FLOAT,
                    Fixed32LE(static_cast<float>(0.5 + 0.45 * t + 0.01 * rng.Gauss())));
      tensor_scalar(val, "val", "epoch_loss", epoch, pb::DT_FLOAT,
                    Fixed32LE(static_cast<float>(LossCurve(t, rng, floor * 1.2))));
      tensor_scalar(val, "val", "epoch_accuracy", epoch, pb::DT_FLOAT,
                    Fixed32LE(static_cast<float>(0.48 + 0.43 * t + 0.01 * rng.Gauss())));
      {
        // Keras keeps the step count as an int64 scalar in some setups.
        pb::Event e = NewEvent(wall, epoch);
        auto* v = e.mutable_summary()->add_value();
        v->set_tag("epoch_steps");
        if (first_time("train/epoch_steps")) {
          *v->mutable_metadata() = PluginMetadata("scalars", std::string(), 1);
        }
        v->mutable_tensor()->set_dtype(pb::DT_INT64);
        v->mutable_tensor()->mutable_tensor_shape();
        v->mutable_tensor()->add_int64_val(step + 1);
        train.Write(e);
      }
      // Histogram of a kernel: a [k, 3] double tensor (left, right, count).
      for (const char* tag : {"dense/kernel_0", "conv2d/kernel_0"}) {
        pb::Event e = NewEvent(wall, epoch);
        auto* v = e.mutable_summary()->add_value();
        v->set_tag(tag);
        if (first_time(std::string("h/") + tag)) {
          *v->mutable_metadata() = PluginMetadata("histograms", std::string(), 2);
        }
        SetKernelHistogram(v, rng, t);
        train.Write(e);
      }
      if (epoch == 0) {
        pb::Event e = NewEvent(wall, epoch);
        auto* v = e.mutable_summary()->add_value();
        v->set_tag("inputs/image");
        *v->mutable_metadata() = PluginMetadata("images", std::string(), 3);
        pb::TensorProto* tensor = v->mutable_tensor();
        tensor->set_dtype(pb::DT_STRING);
        tensor->mutable_tensor_shape()->add_dim()->set_size(3);
        tensor->add_string_val("32");
        tensor->add_string_val("32");
        tensor->add_string_val(image);
        train.Write(e);
      }
    }
  }
  TBFS_RETURN_IF_ERROR(train.Close());
  TBFS_RETURN_IF_ERROR(val.Close());

  if (trace_bytes > 0) {
    // The profiler marks the run with an empty event file beside its output.
    double when = start + 30;
    EventFile marker(ctx);
    TBFS_RETURN_IF_ERROR(marker.Open(fmt::format("{}/train/events.out.tfevents.{}.{}.profile-empty",
                                                 run, static_cast<int64_t>(when), ctx.host),
                                     when));
    TBFS_RETURN_IF_ERROR(marker.Close());
    time_t secs = static_cast<time_t>(when);
    struct tm tm;
    gmtime_r(&secs, &tm);
    std::string dir = fmt::format("{}/{}/train/plugins/profile/{:04}_{:02}_{:02}_{:02}_{:02}_{:02}",
                                  ctx.logdir, run, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                                  tm.tm_hour, tm.tm_min, tm.tm_sec);
    TBFS_RETURN_IF_ERROR(MakeDirs(dir));
    TBFS_RETURN_IF_ERROR(WriteTfProfile(ctx, dir, rng, trace_bytes, when));
  }
  return Status::OK();
}

}  // namespace tbfs::gen
