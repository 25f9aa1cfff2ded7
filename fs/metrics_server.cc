#include "fs/metrics_server.h"

#include <civetweb.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "fs/metrics.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                            Collect collect) {
  if (std::string why = CheckCanListen(address); !why.empty()) {
    return Status::InvalidArgument("metrics: cannot listen on " + address + ": " + why);
  }
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<MetricsServer> server(new MetricsServer(std::move(collect)));
  const char* options[] = {"listening_ports",
                           address.c_str(),
                           "num_threads",
                           "8",
                           "request_timeout_ms",
                           "1000",
                           "enable_keep_alive",
                           "no",
                           nullptr};
  struct mg_callbacks callbacks {};
  callbacks.log_message = [](const ::mg_connection*, const char* message) {
    spdlog::warn("metrics server: {}", message);
    return 1;
  };
  server->ctx_ = mg_start(&callbacks, nullptr, options);
  if (server->ctx_ == nullptr) {
    return Status::InvalidArgument("metrics: cannot listen on " + address + " (see the log)");
  }
  mg_set_request_handler(server->ctx_, "/metrics$", &MetricsServer::Handle, server.get());
  return server;
}

MetricsServer::~MetricsServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int MetricsServer::Handle(::mg_connection* conn, void* self) {
  const struct mg_request_info* info = mg_get_request_info(conn);
  if (std::strcmp(info->request_method, "GET") != 0 &&
      std::strcmp(info->request_method, "HEAD") != 0) {
    mg_send_http_error(conn, 405, "only GET and HEAD");
    return 405;
  }
  // Collected on a thread of the usual stack size: civetweb's workers have
  // 100 KiB (Debian's build), less than reading a store or a file needs.
  std::string body;
  std::thread collector([&] { body = static_cast<MetricsServer*>(self)->collect_(); });
  collector.join();
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  if (std::strcmp(info->request_method, "GET") == 0) mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace tbfs::fs
