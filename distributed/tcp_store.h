// TcpStore: the key-value store of the rendezvous. Rank 0 hosts the server at
// MASTER_ADDR:MASTER_PORT (a thread in its process); every rank, rank 0 included, is a client.
// Ranks publish their addresses and arrival under keys and wait for each other's. The Gloo
// process group reaches it through an adapter to gloo::rendezvous::Store (this Gloo version has
// no TCP store of its own); a later NCCL group will exchange its unique id through it.
// Decision: the client polls for missing keys (every few ms) instead of the server pushing
// notifications: the store serves only start-up traffic, and polling keeps the server a single
// poll(2) loop whose every wait is bounded by a timeout.
//
//   TcpStore store({.host = "127.0.0.1", .port = 29500, .is_server = rank == 0});
//   store.set("rank/1", "here");
//   store.wait({"rank/0", "rank/1"});         // DistributedTimeoutError names the missing keys
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mixgrad/distributed/socket.h"

namespace mg::distributed {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // where the server listens / the clients connect
  int port = 29500;                // 0 with is_server: an ephemeral port (see TcpStore::port())
  bool is_server = false;          // host the server in this process
  // Bound of every operation: connecting, and waiting for a key in get() and wait().
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

class TcpStoreServer;

class TcpStore {
 public:
  // Starts the server first when options.is_server, then connects (retrying until the timeout:
  // the server may start after its clients). Throws DistributedTimeoutError when no server
  // answers in time, DistributedError when the port cannot be bound.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  void set(const std::string& key, const std::string& value);
  // The value of `key`, waiting for it up to the store's timeout.
  std::vector<char> get(const std::string& key);
  // Adds `delta` to the integer stored at `key` (0 when absent) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // The keys of `keys` not set yet (no waiting).
  std::vector<std::string> missing(const std::vector<std::string>& keys);
  // Waits until every key is set; throws DistributedTimeoutError naming the missing keys.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  int port() const { return port_; }  // the server's port (useful with port 0)
  const TcpStoreOptions& options() const { return options_; }

 private:
  std::vector<char> request(const std::vector<char>& msg);
  std::string where() const;

  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  detail::Socket conn_;
  int port_ = 0;
  std::mutex mu_;
};

}  // namespace mg::distributed
