// PyTorch profiler traces in the Kineto (Chrome trace) layout.
//
// One training step of a ResNet-50-like model is laid out once (layers,
// shapes, kernels, nominal durations); the trace then repeats that step with
// jittered durations, increasing timestamps, ids and correlations, CPU ops
// nested as the dispatcher nests them, a cudaLaunchKernel and a GPU kernel
// per leaf op linked by ac2g flow events, and [memory] events. That is the
// structure that makes real traces compress 30x and more.
#include <cmath>
#include <vector>

#include "fmt/format.h"
#include "tools/gen/gen_internal.h"

namespace tbfs::gen {

namespace {

struct Layer {
  std::vector<std::string> chain;  // nested CPU ops, outermost first
  std::string dims;                // "Input Dims" of the outermost op
  std::string types;               // "Input type"
  std::string kernel;              // GPU kernel of the innermost op
  double gpu_us;                   // nominal kernel duration
  int grid;
  int block;
  std::string stack;  // "Call stack" (with_stack=True)
};

// Python call stacks as the profiler records them with with_stack=True.
std::string Stack(const std::string& module_frames, int block) {
  return fmt::format(
      "{}torch/nn/modules/module.py(1501): _call_impl;torchvision/models/resnet.py(155): forward;"
      "torch/nn/modules/module.py(1501): _call_impl;torch/nn/modules/container.py(217): forward;"
      "torch/nn/modules/module.py(1501): _call_impl;torchvision/models/resnet.py({}): "
      "_forward_impl;"
      "torchvision/models/resnet.py(285): forward;torch/nn/modules/module.py(1501): _call_impl;"
      "train.py(88): train_step;train.py(121): <module>",
      module_frames, 268 + block % 4);
}

const char* kConvKernels[] = {
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_"
    "warpsize2x2x1_g1_tensor16x8x8_kernel_cudnn",
    "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, "
    "int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, "
    "int, float, float, int, float const*, float const*, bool, int, int)",
    "volta_scudnn_128x64_relu_interior_nn_v1",
};
const char* kBnKernel =
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, "
    "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, "
    "float*, float*, float*, float, float)";
const char* kReluKernel =
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
    "namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#8}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::clamp_min_scalar_kernel_"
    "impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::operator()() const::{lambda()#8}::"
    "operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)";
const char* kAddKernel =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)";
const char* kMulKernel =
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
    "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> "
    ">, at::detail::Array<char*, 3>)";

std::vector<Layer> BuildStep(Rng& rng, int batch) {
  std::vector<Layer> forward, backward, optim;
  struct Stage {
    int channels, size, blocks;
  } stages[] = {{64, 56, 3}, {128, 28, 4}, {256, 14, 6}, {512, 7, 3}};
  int in_ch = 64;
  for (const Stage& s : stages) {
    for (int b = 0; b < s.blocks; ++b) {
      int widths[3][3] = {
          {in_ch, s.channels, 1}, {s.channels, s.channels, 3}, {s.channels, s.channels * 4, 1}};
      for (auto& w : widths) {
        std::string act = fmt::format("[{}, {}, {}, {}]", batch, w[0], s.size, s.size);
        std::string wt = fmt::format("[{}, {}, {}, {}]", w[1], w[0], w[2], w[2]);
        double us = 40.0 + 0.004 * w[0] * w[1] * w[2] * w[2] * s.size * s.size / 784.0;
        forward.push_back(
            {{"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"},
             fmt::format("[{}, {}, [], [], [], [], []]", act, wt),
             "[\"float\", \"float\", \"\", \"ScalarList\", \"ScalarList\", "
             "\"ScalarList\", \"Scalar\"]",
             kConvKernels[rng.Below(3)],
             us,
             s.size * s.size * 4,
             256,
             Stack("torch/nn/modules/conv.py(463): _conv_forward;"
                   "torch/nn/modules/conv.py(459): forward;",
                   b)});
        std::string out = fmt::format("[{}, {}, {}, {}]", batch, w[1], s.size, s.size);
        forward.push_back(
            {{"aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"},
             fmt::format("[{}, [{}], [{}], [{}], [{}], [], [], [], []]", out, w[1], w[1], w[1],
                         w[1]),
             "[\"float\", \"float\", \"float\", \"float\", \"float\", \"Scalar\", "
             "\"Scalar\", \"Scalar\", \"Scalar\"]",
             kBnKernel,
             us * 0.3,
             w[1],
             512,
             Stack("torch/nn/functional.py(2450): batch_norm;"
                   "torch/nn/modules/batchnorm.py(171): forward;",
                   b)});
        forward.push_back({{"aten::relu_", "aten::clamp_min_"},
                           fmt::format("[{}]", out),
                           "[\"float\"]",
                           kReluKernel,
                           us * 0.15,
                           s.size * s.size * 8,
                           128,
                           Stack("torch/nn/functional.py(1457): relu;"
                                 "torch/nn/modules/activation.py(103): forward;",
                                 b)});
        backward.push_back({{"autograd::engine::evaluate_function: ConvolutionBackward0",
                             "ConvolutionBackward0", "aten::convolution_backward"},
                            fmt::format("[{}, {}, {}]", out, act, wt),
                            "[\"float\", \"float\", \"float\"]",
                            kConvKernels[rng.Below(3)],
                            us * 2.1,
                            s.size * s.size * 4,
                            256,
                            ""});
        backward.push_back({{"autograd::engine::evaluate_function: CudnnBatchNormBackward0",
                             "CudnnBatchNormBackward0", "aten::cudnn_batch_norm_backward"},
                            fmt::format("[{}, {}, [{}]]", out, out, w[1]),
                            "[\"float\", \"float\", \"float\"]",
                            kBnKernel,
                            us * 0.5,
                            w[1],
                            512,
                            ""});
        backward.push_back({{"autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0",
                             "aten::threshold_backward"},
                            fmt::format("[{}, {}, []]", out, out),
                            "[\"float\", \"float\", \"Scalar\"]",
                            kReluKernel,
                            us * 0.2,
                            s.size * s.size * 8,
                            128,
                            ""});
        optim.push_back({{"aten::mul_"},
                         fmt::format("[{}, []]", wt),
                         "[\"float\", \"Scalar\"]",
                         kMulKernel,
                         4.0,
                         80,
                         128,
                         ""});
        optim.push_back({{"aten::add_"},
                         fmt::format("[{}, {}, []]", wt, wt),
                         "[\"float\", \"float\", \"Scalar\"]",
                         kAddKernel,
                         5.0,
                         80,
                         128,
                         ""});
        in_ch = w[1];
      }
    }
  }
  std::vector<Layer> step = forward;
  step.insert(step.end(), backward.rbegin(), backward.rend());
  step.insert(step.end(), optim.begin(), optim.end());
  return step;
}

class KinetoWriter {
 public:
  KinetoWriter(Rng& rng, int pid, double start_us, std::string* buf)
      : rng_(rng), pid_(pid), now_us_(start_us), buf_(*buf) {}

  void Header() {
    fmt::format_to(std::back_inserter(buf_),
                   "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n");
    for (int d = 0; d < 8; ++d) {
      fmt::format_to(std::back_inserter(buf_),
                     "    {{\n      \"id\": {}, \"name\": \"NVIDIA A100-SXM4-80GB\", "
                     "\"totalGlobalMem\": 85031714816,\n      \"computeMajor\": 8, "
                     "\"computeMinor\": 0,\n      \"maxThreadsPerBlock\": 1024, "
                     "\"maxThreadsPerMultiprocessor\": 2048,\n      \"regsPerBlock\": 65536, "
                     "\"regsPerMultiprocessor\": 65536, \"warpSize\": 32,\n      "
                     "\"sharedMemPerBlock\": 49152, \"sharedMemPerMultiprocessor\": 167936,\n      "
                     "\"numSms\": 108, \"sharedMemPerBlockOptin\": 166912\n    }}{}\n",
                     d, d < 7 ? "," : "");
    }
    fmt::format_to(std::back_inserter(buf_),
                   "  ],\n  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": 0, "
                   "\"world_size\": 8, \"pg_count\": 1}},\n  \"record_shapes\": 1,\n  "
                   "\"with_stack\": 1,\n  \"cuda_runtime_version\": 12010,\n  "
                   "\"cuda_driver_version\": 12020,\n  \"trace_id\": \"{:016X}\",\n  "
                   "\"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": 1700000000000000000,"
                   "\n  \"traceEvents\": [\n",
                   rng_.Next());
  }

  // Writes one training step, or as much of it as fits before `full`
  // says the trace is big enough.
  template <typename Full>
  void Step(const std::vector<Layer>& layers, int index, const Full& full) {
    double step_start = now_us_;
    for (const Layer& layer : layers) {
      Op(layer);
      if (full()) break;
    }
    Event("user_annotation", fmt::format("ProfilerStep#{}", index), pid_, pid_, step_start,
          now_us_ - step_start, fmt::format("\"External id\": {}", ++ext_id_));
    now_us_ += 50.0 + 20.0 * rng_.Unit();
  }

  void Footer(const std::string& name) {
    fmt::format_to(std::back_inserter(buf_),
                   "  {{\n    \"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\",\n    "
                   "\"pid\": \"\", \"tid\": \"\", \"ts\": {:.0f}\n  }}\n  ],\n  \"traceName\": "
                   "\"{}\"\n}}\n",
                   now_us_, name);
  }

 private:
  // GPU kernels of a repeated step vary by a few percent, CPU ops more.
  double Jitter(double us, double rel = 0.1) {
    return std::max(1.0, std::round(us * (1.0 + rel * rng_.Gauss())));
  }

  void Event(const char* cat, const std::string& name, int pid, int tid, double ts, double dur,
             const std::string& args) {
    fmt::format_to(std::back_inserter(buf_),
                   "  {{\n    \"ph\": \"X\", \"cat\": \"{}\", \"name\": \"{}\", \"pid\": {}, "
                   "\"tid\": {},\n    \"ts\": {:.0f}, \"dur\": {:.0f},\n    \"args\": {{\n      "
                   "{}\n    }}\n  }},\n",
                   cat, name, pid, tid, ts, dur, args);
  }

  void Op(const Layer& layer) {
    double ts = now_us_;
    double cpu_total = Jitter(12.0 + 6.0 * layer.chain.size());
    int64_t correlation = ++correlation_;
    int64_t ext = ++ext_id_;
    int64_t seq = ++sequence_;
    // Nested CPU ops: each child starts a little after its parent.
    double child_ts = ts;
    double child_dur = cpu_total;
    for (size_t i = 0; i < layer.chain.size(); ++i) {
      bool outer = i == 0;
      std::string args = fmt::format(
          "\"External id\": {}, \"Record function id\": 0, \"Sequence number\": {}, "
          "\"Fwd thread id\": 0, \"Ev Idx\": {}",
          ext + static_cast<int64_t>(i), seq, ++ev_idx_);
      if (outer) {
        args +=
            fmt::format(",\n      \"Input Dims\": {}, \"Input type\": {}", layer.dims, layer.types);
      }
      args += ",\n      \"Trace name\": \"PyTorch Profiler\", \"Trace iteration\": 0";
      if (!layer.stack.empty()) {
        args += fmt::format(",\n      \"Call stack\": \"{}\"", layer.stack);
      }
      Event("cpu_op", layer.chain[i], pid_, pid_, child_ts, child_dur, args);
      child_ts += Jitter(1.5);
      child_dur = std::max(1.0, child_dur - Jitter(3.0));
    }
    ext_id_ += static_cast<int64_t>(layer.chain.size()) - 1;
    // A caching-allocator event for the output.
    if (rng_.Chance(0.5)) {
      int64_t bytes = 512 * static_cast<int64_t>(1 + rng_.Below(4096));
      allocated_ += bytes;
      fmt::format_to(std::back_inserter(buf_),
                     "  {{\n    \"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", "
                     "\"name\": \"[memory]\",\n    \"pid\": {}, \"tid\": {},\n    \"ts\": {:.0f},"
                     "\n    \"args\": {{\n      \"Total Reserved\": 23068672000, \"Total "
                     "Allocated\": {}, \"Bytes\": {}, \"Addr\": {}, \"Device Id\": 0, \"Device "
                     "Type\": 1\n    }}\n  }},\n",
                     pid_, pid_, child_ts, allocated_, bytes,
                     140230000000000 + (int64_t{1} << 21) * static_cast<int64_t>(rng_.Below(96)));
    }
    // The launch, its flow arrow, and the kernel on the compute stream.
    double launch_ts = child_ts + Jitter(1.0);
    double launch_dur = Jitter(4.0);
    Event("cuda_runtime", "cudaLaunchKernel", pid_, pid_, launch_ts, launch_dur,
          fmt::format("\"External id\": {}, \"cbid\": 211, \"correlation\": {}", ext, correlation));
    double kernel_ts = std::max(gpu_free_us_, launch_ts + Jitter(6.0));
    double kernel_dur = Jitter(layer.gpu_us, 0.02);
    gpu_free_us_ = kernel_ts + kernel_dur;
    Event("kernel", layer.kernel, 0, 7, kernel_ts, kernel_dur,
          fmt::format("\"External id\": {}, \"queued\": 0, \"device\": 0, \"context\": 1, "
                      "\"stream\": 7, \"correlation\": {}, \"registers per thread\": 72, "
                      "\"shared memory\": 0, \"blocks per SM\": {:.2f}, \"warps per SM\": "
                      "{:.2f}, \"grid\": [{}, 1, 1], \"block\": [{}, 1, 1], \"est. achieved "
                      "occupancy %\": {}",
                      ext, correlation, layer.grid / 108.0, layer.grid * layer.block / 32.0 / 108,
                      layer.grid, layer.block, std::min(100, layer.block / 4)));
    fmt::format_to(std::back_inserter(buf_),
                   "  {{\n    \"ph\": \"s\", \"id\": {}, \"pid\": {}, \"tid\": {}, \"ts\": {:.0f},"
                   "\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }},\n  {{\n    \"ph\": \"f\", "
                   "\"id\": {}, \"pid\": 0, \"tid\": 7, \"ts\": {:.0f},\n    \"cat\": \"ac2g\", "
                   "\"name\": \"ac2g\", \"bp\": \"e\"\n  }},\n",
                   correlation, pid_, pid_, launch_ts, correlation, kernel_ts);
    now_us_ = std::max(ts + cpu_total, launch_ts + launch_dur) + Jitter(3.0);
  }

  Rng& rng_;
  int pid_;
  double now_us_;
  std::string& buf_;
  double gpu_free_us_ = 0;
  int64_t ext_id_ = 0;
  int64_t correlation_ = 0;
  int64_t sequence_ = 0;
  int64_t ev_idx_ = 0;
  int64_t allocated_ = 1 << 30;
};

}  // namespace

Status WriteKinetoTrace(Ctx& ctx, const std::string& path, Rng& rng, uint64_t target_bytes,
                        double start_s, bool gzip) {
  FileSink file(ctx.progress);
  TBFS_RETURN_IF_ERROR(file.Open(path));
  std::unique_ptr<GzipWriter> gz;
  if (gzip) gz = std::make_unique<GzipWriter>(&file, 6);
  // A gzip'd trace of about target_bytes holds about 10x as much JSON.
  uint64_t json_target = gzip ? target_bytes * 10 : target_bytes;

  std::vector<Layer> step = BuildStep(rng, 32 << rng.Below(3));
  std::string buf;
  uint64_t json_bytes = 0;
  auto drain = [&] {
    json_bytes += buf.size();
    if (gz) {
      gz->Write(buf);
    } else {
      file.Write(buf);
    }
    buf.clear();
  };
  const int pid = ctx.pid + static_cast<int>(rng.Below(1000));
  KinetoWriter writer(rng, pid, start_s * 1e6, &buf);
  writer.Header();
  auto full = [&] { return json_bytes + buf.size() >= json_target; };
  for (int i = 0; !full(); ++i) {
    writer.Step(step, i, full);
    if (buf.size() >= (1 << 20)) drain();
  }
  writer.Footer(path.substr(path.find_last_of('/') + 1));
  drain();
  if (gz) gz->Finish();
  uint64_t size = file.size();
  TBFS_RETURN_IF_ERROR(file.Close());
  ctx.CountTrace(size);
  return Status::OK();
}

}  // namespace tbfs::gen
