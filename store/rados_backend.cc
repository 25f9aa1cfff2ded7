// Ceph RADOS behind store/backend.h (docs/format.md, "The RADOS store").
//
// Objects, all named PREFIX + ...:
//   "head"            its omap holds every small space (namespace,
//                     manifests, journal, baselines, meta): key = hex(space
//                     byte + key), so omap order is key order and a key may
//                     hold any byte
//   "c/" + hex(key)   one object per chunk (key: file id + index)
//
// RADOS has no transaction across objects. Commit writes in an order that
// leaves either the old or the new state visible after a crash at any
// point: first the chunks it puts (under keys no record names yet: file
// ids are never reused), then one atomic write to the head's omap (the
// batch's commit point), then the chunks it deletes (which no record names
// any more). A crash before the head write leaves unreachable chunks, one
// after it chunks of deleted files: garbage that fsck names and the next
// deletion of the same file removes, never a record without its data.
#include "store/rados_backend.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <rados/librados.hpp>
#include <set>

#include "base/failpoint.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"
#include "store/format.h"
#include "store/rados_internal.h"

namespace tbfs::store {

namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string Hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

bool Unhex(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  out->clear();
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

std::string OmapKey(Space space, std::string_view key) {
  const char s = static_cast<char>(space);
  return Hex(std::string_view(&s, 1)) + Hex(key);
}

// A chunk value holds at most its header and a 64 MiB chunk stored raw
// (tbfs migrate --chunk-size is 64M at most).
constexpr size_t kMaxChunkValueBytes = 65u << 20;

// Whole-file deletes remove chunks this many at a time, in parallel.
constexpr uint64_t kRemoveWave = 64;

class RadosBackend final : public Backend {
 public:
  RadosBackend(std::unique_ptr<librados::Rados> cluster, librados::IoCtx io, std::string prefix,
               std::shared_ptr<const RadosFence> fence)
      : cluster_(std::move(cluster)),
        io_(std::move(io)),
        prefix_(std::move(prefix)),
        head_(prefix_ + "head"),
        fence_(std::move(fence)) {}

  ~RadosBackend() override {
    io_.close();
    cluster_->shutdown();
  }

  Status Commit(const WriteBatch& batch,
                bool /*sync: every RADOS write is durable on ack*/) override {
    std::shared_ptr<RadosLease> lease;
    if (fence_) {
      lease = fence_->lease();
      if (!lease || !lease->held()) {
        return Status::FromErrno(
            EROFS, "commit",
            fmt::format(
                "{}: this process does not hold the store's writer's lease (another one writes it)",
                head_));
      }
    }
    std::vector<const WriteBatch::Op*> chunk_puts, chunk_deletes;
    std::map<std::string, librados::bufferlist> omap_puts;
    std::set<std::string> omap_deletes;
    for (const auto& op : batch.ops()) {
      if (op.space == Space::kChunks) {
        (op.is_delete ? chunk_deletes : chunk_puts).push_back(&op);
      } else if (op.is_delete) {
        omap_puts.erase(OmapKey(op.space, op.key));
        omap_deletes.insert(OmapKey(op.space, op.key));
      } else {
        omap_deletes.erase(OmapKey(op.space, op.key));
        omap_puts[OmapKey(op.space, op.key)].append(op.value.data(), op.value.size());
      }
    }
    // 1. The chunks, in parallel, under keys nothing names yet.
    std::vector<std::unique_ptr<librados::AioCompletion>> writes;
    std::vector<std::string> oids;
    for (const WriteBatch::Op* op : chunk_puts) {
      librados::bufferlist bl;
      bl.append(op->value.data(), op->value.size());
      writes.emplace_back(librados::Rados::aio_create_completion());
      oids.push_back(ChunkOid(op->key));
      int r = io_.aio_write_full(oids.back(), writes.back().get(), bl);
      if (r < 0) return FromRados(r, "write", oids.back());
    }
    Status first;
    for (size_t i = 0; i < writes.size(); ++i) {
      writes[i]->wait_for_complete();
      if (first.ok()) first = FromRados(writes[i]->get_return_value(), "write", oids[i]);
    }
    TBFS_RETURN_IF_ERROR(first);
    MaybeCrash("rados.before_commit_point");
    // 2. The commit point: one atomic write to the head's omap, which a
    // fenced writer makes conditional on its lease (and makes even with
    // nothing to write, before it deletes chunks).
    if (!omap_puts.empty() || !omap_deletes.empty() || lease) {
      librados::ObjectWriteOperation w;
      librados::bufferlist assert_input;  // must outlive the operation
      w.assert_exists();
      if (lease) {
        assert_input = AssertLockedInput(lease->cookie());
        w.exec("lock", "assert_locked", assert_input);
      }
      if (!omap_deletes.empty()) w.omap_rm_keys(omap_deletes);
      if (!omap_puts.empty()) w.omap_set(omap_puts);
      // cls_lock knows a lock's holder by client and cookie: a fenced
      // commit point is sent by the client that holds the lease.
      const int r = lease ? RadosLeaseAccess::Operate(*lease, head_, &w) : io_.operate(head_, &w);
      if (lease && (r == -EBUSY || r == -ENOENT)) {
        return Status::FromErrno(
            EROFS, "commit",
            fmt::format(
                "{}: the writer's lease is no longer this process's ({}); nothing was written",
                head_, lease->cookie()));
      }
      TBFS_RETURN_IF_ERROR(FromRados(r, "omap commit", head_));
    }
    MaybeCrash("rados.after_commit_point");
    // 3. Chunks no record names any more.
    return RemoveChunks(chunk_deletes);
  }

  Status Get(Space space, std::string_view key, std::string* value) override {
    if (space == Space::kChunks) {
      // One round trip: a read longer than any chunk value returns the
      // whole object (a read past an object's end is short, not an error).
      const std::string oid = ChunkOid(key);
      librados::bufferlist bl;
      const int r = io_.read(oid, bl, kMaxChunkValueBytes, 0);
      if (r == -ENOENT) return Status::NotFound("no chunk " + oid);
      TBFS_RETURN_IF_ERROR(FromRados(r, "read", oid));
      value->assign(bl.c_str(), bl.length());
      return Status::OK();
    }
    const std::string k = OmapKey(space, key);
    std::map<std::string, librados::bufferlist> got;
    TBFS_RETURN_IF_ERROR(FromRados(io_.omap_get_vals_by_keys(head_, {k}, &got), "omap get", head_));
    auto it = got.find(k);
    if (it == got.end()) return Status::NotFound("no key in " + head_);
    value->assign(it->second.c_str(), it->second.length());
    return Status::OK();
  }

  Status Scan(Space space, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override {
    if (space != Space::kChunks) return ScanOmap(space, prefix, fn);
    std::vector<std::string> keys;
    TBFS_RETURN_IF_ERROR(ListChunkKeys(&keys));
    std::sort(keys.begin(), keys.end());
    for (const std::string& key : keys) {
      if (!key.starts_with(prefix)) continue;
      std::string value;
      Status st = Get(Space::kChunks, key, &value);
      if (st.IsNotFound()) continue;  // deleted since the listing
      TBFS_RETURN_IF_ERROR(st);
      if (!fn(key, value)) break;
    }
    return Status::OK();
  }

  Status LastKey(Space space, std::string* key) override {
    bool any = false;
    if (space == Space::kChunks) {
      std::vector<std::string> keys;
      TBFS_RETURN_IF_ERROR(ListChunkKeys(&keys));
      if (keys.empty()) return Status::NotFound("no chunks");
      *key = *std::max_element(keys.begin(), keys.end());
      return Status::OK();
    }
    TBFS_RETURN_IF_ERROR(ScanOmap(space, "", [&](std::string_view k, std::string_view) {
      key->assign(k);
      any = true;
      return true;
    }));
    return any ? Status::OK() : Status::NotFound("empty space");
  }

  uint64_t DiskBytes() override {
    std::list<std::string> pools = {io_.get_pool_name()};
    std::map<std::string, librados::pool_stat_t> stats;
    if (cluster_->get_pool_stats(pools, stats) < 0 || stats.empty()) return 0;
    return stats.begin()->second.num_bytes;
  }

  Status FreeBytes(uint64_t* free, uint64_t* size) override {
    librados::cluster_stat_t st;
    TBFS_RETURN_IF_ERROR(
        FromRados(cluster_->cluster_stat(st), "cluster stat", io_.get_pool_name()));
    // The figures come from the manager daemon: a cluster without one
    // reports none, and the room check is then the OSDs' own (ENOSPC).
    if (st.kb == 0)
      return Status::NotSupported("the cluster reports no capacity (no ceph-mgr running?)");
    *free = st.kb_avail * 1024;
    *size = st.kb * 1024;
    return Status::OK();
  }

  uint64_t UnflushedBytes() override { return 0; }    // no log of its own to replay
  Status Compact() override { return Status::OK(); }  // the OSDs reclaim deleted objects
  Status Flush() override { return Status::OK(); }

 private:
  std::string ChunkOid(std::string_view key) const { return prefix_ + "c/" + Hex(key); }

  Status ScanOmap(Space space, std::string_view prefix,
                  const std::function<bool(std::string_view, std::string_view)>& fn) {
    const std::string filter = OmapKey(space, prefix);
    std::string after;
    for (bool more = true; more;) {
      std::map<std::string, librados::bufferlist> vals;
      int r = io_.omap_get_vals2(head_, after, filter, 1000, &vals, &more);
      TBFS_RETURN_IF_ERROR(FromRados(r, "omap list", head_));
      std::string key;
      for (auto& [k, v] : vals) {
        after = k;
        if (!Unhex(std::string_view(k).substr(2), &key)) {
          return Status::Corruption(fmt::format("{}: an omap key that is not ours: {}", head_, k));
        }
        if (!fn(key, std::string_view(v.c_str(), v.length()))) return Status::OK();
      }
      if (vals.empty()) break;
    }
    return Status::OK();
  }

  // Every chunk key of this store (a listing of the pool: for scans only,
  // never on a read or write path).
  Status ListChunkKeys(std::vector<std::string>* keys) {
    const std::string mine = prefix_ + "c/";
    try {
      for (auto it = io_.nobjects_begin(); it != io_.nobjects_end(); ++it) {
        const std::string& oid = it->get_oid();
        std::string key;
        if (oid.starts_with(mine) && Unhex(std::string_view(oid).substr(mine.size()), &key))
          keys->push_back(key);
      }
    } catch (const std::exception& e) {
      return Status::FromErrno(EIO, "rados list", io_.get_pool_name() + ": " + e.what());
    }
    return Status::OK();
  }

  // Removes chunk objects, kRemoveWave at a time in parallel (a file of N
  // chunks costs N / kRemoveWave + 1 round trips); one already gone is no
  // error.
  Status RemoveChunks(const std::vector<const WriteBatch::Op*>& deletes) {
    for (size_t first = 0; first < deletes.size(); first += kRemoveWave) {
      const size_t end = std::min(deletes.size(), first + kRemoveWave);
      std::vector<std::unique_ptr<librados::AioCompletion>> removes;
      std::vector<std::string> oids;
      Status error;
      for (size_t i = first; i < end; ++i) {
        oids.push_back(ChunkOid(deletes[i]->key));
        removes.emplace_back(librados::Rados::aio_create_completion());
        const int r = io_.aio_remove(oids.back(), removes.back().get());
        if (r < 0) {
          removes.pop_back();  // not sent: it would never complete
          error = FromRados(r, "remove", oids.back());
          break;
        }
      }
      for (size_t i = 0; i < removes.size(); ++i) {  // none may outlive its oid
        removes[i]->wait_for_complete();
        const int r = removes[i]->get_return_value();
        if (r < 0 && r != -ENOENT && error.ok()) error = FromRados(r, "remove", oids[i]);
      }
      TBFS_RETURN_IF_ERROR(error);
    }
    return Status::OK();
  }

  std::unique_ptr<librados::Rados> cluster_;
  librados::IoCtx io_;
  const std::string prefix_;
  const std::string head_;
  const std::shared_ptr<const RadosFence> fence_;
};

}  // namespace

std::string Describe(const RadosLocation& where) {
  return fmt::format("rados://{}/{}", where.pool, where.prefix);
}

Status Connect(const RadosLocation& where, Connection* c) {
  const std::string what = Describe(where);
  c->cluster = std::make_unique<librados::Rados>();
  const std::string user = where.user.empty() ? "admin" : where.user;
  int r = c->cluster->init2(("client." + user).c_str(), "ceph", 0);
  if (r < 0) {
    c->cluster.reset();
    return FromRados(r, "init", what);
  }
  if (!where.conf.empty()) {
    r = c->cluster->conf_read_file(where.conf.c_str());
    if (r < 0) return FromRados(r, "read the configuration", where.conf);
  }
  // An unreachable cluster fails operations after a bounded time (EIO to a
  // reader), never hangs them.
  const std::string timeout = std::to_string(where.timeout_s);
  for (const char* option :
       {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
    c->cluster->conf_set(option, timeout.c_str());
  }
  r = c->cluster->connect();
  if (r < 0)
    return FromRados(r, "connect",
                     what + " (" + (where.conf.empty() ? "default ceph.conf" : where.conf) + ")");
  r = c->cluster->ioctx_create(where.pool.c_str(), c->io);
  if (r < 0)
    return r == -ENOENT ? Status::NotFound(what + ": no pool " + where.pool)
                        : FromRados(r, "open pool", what);
  return Status::OK();
}

Result<std::unique_ptr<Backend>> OpenRadosBackend(const RadosLocation& where,
                                                  const BackendOptions& options,
                                                  std::shared_ptr<const RadosFence> fence) {
  const std::string what = Describe(where);
  if (options.best_efforts)
    return Status::NotSupported(what + ": salvage reads a RADOS store as it is");
  Connection c;
  TBFS_RETURN_IF_ERROR(Connect(where, &c));
  librados::IoCtx& io = c.io;
  const std::string head = where.prefix + "head";
  uint64_t size;
  time_t mtime;
  int r = io.stat(head, &size, &mtime);
  if (r == -ENOENT) {
    if (!options.create_if_missing || options.read_only)
      return Status::NotFound(what + ": no tbfs store there");
    librados::ObjectWriteOperation create;
    create.create(false);  // two creators at once: both see the same empty head
    r = io.operate(head, &create);
  }
  if (r < 0) return FromRados(r, "open", what + " " + head);
  return std::unique_ptr<Backend>(
      new RadosBackend(std::move(c.cluster), std::move(c.io), where.prefix, std::move(fence)));
}

}  // namespace tbfs::store
