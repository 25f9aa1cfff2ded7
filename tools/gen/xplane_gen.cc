// TensorFlow profiler output for one profiling session:
//   HOST.xplane.pb            XSpace protobuf: device and host planes whose
//                             lines hold one event per op execution
//   HOST.trace.json.gz        the older trace viewer JSON, gzip'd
//   HOST.memory_profile.json.gz
//   HOST.overview_page.pb
// Field numbers of XSpace follow tensorflow/tsl/profiler/protobuf/xplane.proto.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <cmath>
#include <vector>

#include "fmt/format.h"
#include "tools/gen/gen_internal.h"

namespace tbfs::gen {

namespace {

using google::protobuf::internal::WireFormatLite;

// Appends protobuf fields to a string.
class Proto {
 public:
  Proto& Int(int field, int64_t v) {
    Put(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_VARINT));
    Put(static_cast<uint64_t>(v));
    return *this;
  }
  Proto& Double(int field, double v) {
    Put(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_FIXED64));
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    for (int k = 0; k < 8; ++k) s_.push_back(static_cast<char>(bits >> (8 * k)));
    return *this;
  }
  Proto& Bytes(int field, std::string_view v) {
    Put(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    Put(v.size());
    s_.append(v);
    return *this;
  }
  Proto& Msg(int field, const Proto& p) { return Bytes(field, p.s_); }
  const std::string& str() const { return s_; }
  size_t size() const { return s_.size(); }
  void clear() { s_.clear(); }

 private:
  void Put(uint64_t v) {
    uint8_t tmp[10];
    uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, tmp);
    s_.append(reinterpret_cast<char*>(tmp), static_cast<size_t>(end - tmp));
  }
  std::string s_;
};

const char* kTfOps[] = {
    "model/conv2d/Conv2D",
    "model/conv2d/BiasAdd",
    "model/batch_normalization/FusedBatchNormV3",
    "model/re_lu/Relu",
    "model/max_pooling2d/MaxPool",
    "model/conv2d_1/Conv2D",
    "model/conv2d_2/Conv2D",
    "model/add/add",
    "model/dense/MatMul",
    "model/dense/BiasAdd",
    "gradient_tape/model/conv2d/Conv2DBackpropFilter",
    "gradient_tape/model/conv2d/Conv2DBackpropInput",
    "gradient_tape/model/re_lu/ReluGrad",
    "SGD/SGD/update/ResourceApplyGradientDescent",
    "sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits",
    "IteratorGetNext",
};
const char* kKernels[] = {
    "volta_sgemm_128x64_nn",
    "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc",
    "void tensorflow::BiasNHWCKernel<float>(int, float const*, float const*, float*, int)",
    "void cudnn::bn_fw_tr_1C11_kernel_NHWC<__half, float, 512, true, 1>",
    "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<"
    "Eigen::TensorMap<Eigen::Tensor<float, 1, 1, long>, 16>, Eigen::TensorCwiseUnaryOp<"
    "Eigen::internal::scalar_max_op<float const, float const>, Eigen::TensorMap<Eigen::Tensor<"
    "float const, 1, 1, long>, 16> const> const> const, Eigen::GpuDevice>, long>",
    "redzone_checker",
    "ncclKernel_AllReduce_RING_LL_Sum_float",
};
const char* kStats[] = {"correlation_id", "kernel_details", "group_id",  "step_num",
                        "tf_op",          "memcpy_details", "long_name", "flops"};

// One XPlane of about target bytes: a device plane (kernels on streams) or
// the host plane (TF ops on threads).
std::string MakePlane(Rng& rng, int id, bool device, uint64_t target, int64_t start_ns) {
  Proto plane;
  plane.Int(1, id).Bytes(2, device ? fmt::format("/device:GPU:{}", id - 1) : "/host:CPU");
  const int n_meta = device ? 7 : 16;
  for (int m = 1; m <= n_meta; ++m) {
    Proto md;
    md.Int(1, m).Bytes(2, device ? kKernels[m - 1] : kTfOps[m - 1]);
    if (!device) md.Bytes(4, std::string(kTfOps[m - 1]).substr(6));
    plane.Msg(4, Proto().Int(1, m).Msg(2, md));
  }
  for (int m = 1; m <= 8; ++m) {
    plane.Msg(5, Proto().Int(1, m).Msg(2, Proto().Int(1, m).Bytes(2, kStats[m - 1])));
  }
  const int lines = device ? 3 : 4;
  const uint64_t per_line = target / lines;
  int64_t correlation = 1000 + static_cast<int64_t>(rng.Below(1000));
  for (int l = 0; l < lines; ++l) {
    Proto line;
    line.Int(1, device ? 7 + 7 * l : 1000 + l)
        .Bytes(2, device ? fmt::format("Stream #{}", 7 + 7 * l) : fmt::format("tf_Compute/{}", l))
        .Int(3, start_ns);
    int64_t offset_ps = static_cast<int64_t>(rng.Below(1'000'000));
    int64_t step = 0;
    Proto event, stat;
    for (int op = 0; line.size() < per_line; ++op) {
      int meta = 1 + static_cast<int>((op * 7 + step) % n_meta);
      // A kernel's duration varies by a percent or two from step to step;
      // host-side ops vary more.
      double nominal = 20'000.0 + 9'000.0 * meta;
      int64_t dur = static_cast<int64_t>(nominal * (1.0 + (device ? 0.02 : 0.08) * rng.Gauss()));
      if (dur < 1000) dur = 1000;
      event.clear();
      event.Int(1, meta).Int(2, offset_ps).Int(3, dur);
      event.Msg(4, Proto().Int(1, 1).Int(3, correlation++));
      event.Msg(4, Proto().Int(1, 4).Int(3, step));
      if (device) {
        event.Msg(4, Proto().Int(1, 2).Bytes(
                         5, fmt::format("regs:{} shm:{} grid:{},1,1 block:{},"
                                        "1,1",
                                        32 + 8 * (meta % 5), 0, 64 << (meta % 4), 128)));
      } else {
        event.Msg(4, Proto().Int(1, 5).Bytes(5, kTfOps[meta - 1]));
      }
      line.Msg(4, event);
      offset_ps += dur + 1000 * static_cast<int64_t>(rng.Below(4));
      if (op % 300 == 299) ++step;
    }
    line.Int(9, offset_ps);
    plane.Msg(3, line);
  }
  return plane.str();
}

Status WriteXspace(Ctx& ctx, const std::string& path, Rng& rng, uint64_t target, int64_t start_ns) {
  FileSink file(ctx.progress);
  TBFS_RETURN_IF_ERROR(file.Open(path));
  // One plane per device; planes are built in memory, so keep each under
  // kPlaneBytes and add devices for bigger profiles.
  constexpr uint64_t kPlaneBytes = 48ull << 20;
  int planes = static_cast<int>(std::max<uint64_t>(2, (target + kPlaneBytes - 1) / kPlaneBytes));
  Proto space;
  for (int p = 0; p < planes; ++p) {
    bool device = p + 1 < planes;
    std::string plane =
        MakePlane(rng, device ? p + 1 : planes + 1000, device, target / planes, start_ns);
    space.clear();
    space.Bytes(1, plane);
    file.Write(space.str());
  }
  file.Write(Proto().Bytes(4, ctx.host).str());
  uint64_t size = file.size();
  TBFS_RETURN_IF_ERROR(file.Close());
  ctx.CountTrace(size);
  return Status::OK();
}

Status WriteTraceJsonGz(Ctx& ctx, const std::string& path, Rng& rng, uint64_t target) {
  FileSink file(ctx.progress);
  TBFS_RETURN_IF_ERROR(file.Open(path));
  GzipWriter gz(&file, 6);
  std::string buf =
      "{\"displayTimeUnit\":\"ns\",\"metadata\":{\"highres-ticks\":true},"
      "\"traceEvents\":[{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\","
      "\"args\":{\"name\":\"/device:GPU:0\"}},";
  double ts = 0;
  bool first = true;
  while (gz.compressed_bytes() < target) {
    for (int i = 0; i < 2000; ++i) {
      int op = static_cast<int>(rng.Below(16));
      double dur = (20.0 + 9.0 * (op % 7)) * (1.0 + 0.2 * rng.Gauss());
      fmt::format_to(std::back_inserter(buf),
                     "{}{{\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},\"ph\":\"X\","
                     "\"name\":\"{}\",\"args\":{{\"step_num\":\"{}\"}}}}",
                     first ? "" : ",", 1 + op % 2, 7 + op % 3, ts, std::max(1.0, dur), kTfOps[op],
                     static_cast<int64_t>(ts / 50000));
      first = false;
      ts += std::max(1.0, dur) + static_cast<double>(rng.Below(3));
    }
    gz.Write(buf);
    buf.clear();
  }
  gz.Write("]}");
  gz.Finish();
  uint64_t size = file.size();
  TBFS_RETURN_IF_ERROR(file.Close());
  ctx.CountTrace(size);
  return Status::OK();
}

Status WriteMemoryProfile(Ctx& ctx, const std::string& path, Rng& rng, uint64_t target) {
  FileSink file(ctx.progress);
  TBFS_RETURN_IF_ERROR(file.Open(path));
  GzipWriter gz(&file, 6);
  std::string buf = "{\"memoryProfilePerAllocator\":{\"GPU_0_bfc\":{\"memoryProfileSnapshots\":[";
  int64_t in_use = 1 << 28, t_ps = 0;
  bool first = true;
  while (gz.compressed_bytes() < target) {
    for (int i = 0; i < 1000; ++i) {
      int64_t delta = static_cast<int64_t>(rng.Below(1 << 22)) - (1 << 21);
      in_use = std::max<int64_t>(1 << 20, in_use + delta);
      t_ps += static_cast<int64_t>(rng.Below(5'000'000));
      fmt::format_to(std::back_inserter(buf),
                     "{}{{\"timeOffsetPs\":\"{}\",\"aggregationStats\":{{\"stackReservedBytes\":"
                     "\"0\",\"heapAllocatedBytes\":\"{}\",\"freeMemoryBytes\":\"{}\","
                     "\"fragmentation\":{:.4f},\"peakBytesInUse\":\"{}\"}},\"activityMetadata\":{{"
                     "\"memoryActivity\":\"{}\",\"requestedBytes\":\"{}\",\"allocationBytes\":"
                     "\"{}\",\"address\":\"{}\",\"tfOpName\":\"{}\",\"stepId\":\"{}\"}}}}",
                     first ? "" : ",", t_ps, in_use, (int64_t{80} << 30) - in_use, rng.Unit() * 0.1,
                     in_use + (1 << 24), delta > 0 ? "ALLOCATION" : "DEALLOCATION", std::abs(delta),
                     (std::abs(delta) + 255) / 256 * 256,
                     140230000000000 + 256 * static_cast<int64_t>(rng.Below(1 << 24)),
                     kTfOps[rng.Below(16)], t_ps / 50'000'000'000);
      first = false;
    }
    gz.Write(buf);
    buf.clear();
  }
  gz.Write("]}}}");
  gz.Finish();
  uint64_t size = file.size();
  TBFS_RETURN_IF_ERROR(file.Close());
  ctx.CountTrace(size);
  return Status::OK();
}

Status WriteOverviewPage(Ctx& ctx, const std::string& path, Rng& rng) {
  FileSink file(ctx.progress);
  TBFS_RETURN_IF_ERROR(file.Open(path));
  Proto page;
  Proto analysis;
  for (int i = 0; i < 40; ++i) {
    Proto op;
    op.Bytes(1, kTfOps[i % 16]).Bytes(2, "Conv2D").Double(3, rng.Unit() * 30).Double(4, rng.Unit());
    analysis.Msg(1, op);
  }
  page.Msg(2, analysis);
  page.Msg(3, Proto().Bytes(1, "Your program is NOT input-bound").Double(2, rng.Unit() * 5));
  page.Msg(4, Proto().Bytes(1, ctx.host).Bytes(2, "NVIDIA A100-SXM4-80GB").Int(3, 8));
  file.Write(page.str());
  uint64_t size = file.size();
  TBFS_RETURN_IF_ERROR(file.Close());
  ctx.CountTrace(size);
  return Status::OK();
}

}  // namespace

Status WriteTfProfile(Ctx& ctx, const std::string& dir, Rng& rng, uint64_t target_bytes,
                      double start_s) {
  std::string base = JoinPath(dir, ctx.host);
  int64_t start_ns = static_cast<int64_t>(start_s * 1e9);
  // The XSpace holds nearly everything; the older JSON tools output is
  // capped (TensorFlow keeps at most a million trace events) and gzip'd.
  TBFS_RETURN_IF_ERROR(
      WriteXspace(ctx, base + ".xplane.pb", rng, target_bytes * 96 / 100, start_ns));
  TBFS_RETURN_IF_ERROR(WriteTraceJsonGz(ctx, base + ".trace.json.gz", rng,
                                        std::min<uint64_t>(target_bytes * 3 / 100, 48 << 20)));
  TBFS_RETURN_IF_ERROR(WriteMemoryProfile(ctx, base + ".memory_profile.json.gz", rng,
                                          std::min<uint64_t>(target_bytes / 100, 16 << 20)));
  return WriteOverviewPage(ctx, base + ".overview_page.pb", rng);
}

}  // namespace tbfs::gen
