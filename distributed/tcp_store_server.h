// The server side of TcpStore: a map of keys to byte strings served by one thread over TCP.
// Internal; TcpStore owns it in the process that hosts the store (rank 0).
// Decision: a single poll(2) loop over the listening socket, the clients and a wake-up pipe;
// requests are small and rare (rendezvous only), so one thread serves every rank. A client that
// sends a malformed request or stalls mid-request is disconnected, never waited on forever.
//
// Wire format (little-endian, what TcpStore sends): u8 command, then
//   SET:   u32 key length, key, u32 value length, value     -> u8 1
//   GET:   u32 key length, key                              -> u8 found, u32 length, value
//   ADD:   u32 key length, key, i64 delta                   -> i64 new value
//   CHECK: u32 count, count x (u32 length, key)             -> u32 n, n x u32 index of a missing key
#pragma once
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "mixgrad/distributed/socket.h"

namespace mg::distributed {

enum class StoreCommand : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4 };

class TcpStoreServer {
 public:
  // Listens on host:port (port 0: ephemeral) and starts serving.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();  // stops the thread and closes every connection
  int port() const { return port_; }

 private:
  void serve();
  // Reads and answers one request; false when the client is gone or misbehaved.
  bool handle(const detail::Socket& client);

  detail::Socket listener_;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::map<std::string, std::vector<char>> data_;
  std::thread thread_;
};

}  // namespace mg::distributed
