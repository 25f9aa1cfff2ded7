// The HTTP server behind Prometheus scrapes (`-o metrics=`, `tbfs
// exporter`): GET /metrics answers with the text `collect` returns, in the
// Prometheus text format; nothing else is served and nothing is counted
// about the server itself (no exposer_* series).
//
// civetweb: eight threads, a connection that has not sent its whole request
// within 1 s is dropped, no keep-alive. A client that connects and sends
// nothing holds a thread until then. A local user who keeps ~80 stalled
// connections open can still push scrapes past Prometheus's 10 s.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

struct mg_context;
struct mg_connection;

namespace tbfs::fs {

class MetricsServer {
 public:
  using Collect = std::function<std::string()>;
  // Listens on `address` (IPv4 ADDR:PORT, as MetricsAddress gives it).
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& address, Collect collect);
  ~MetricsServer();  // stops serving; waits for the scrapes in flight

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

 private:
  explicit MetricsServer(Collect collect) : collect_(std::move(collect)) {}
  static int Handle(::mg_connection* conn, void* self);

  Collect collect_;
  ::mg_context* ctx_ = nullptr;
};

}  // namespace tbfs::fs
