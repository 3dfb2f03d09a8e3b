// Blocking TCP sockets with deadlines, for the rendezvous store (distributed/tcp_store.*).
// Internal to the distributed layer. Every wait is bounded: each call takes an absolute deadline
// and throws DistributedTimeoutError when it passes, DistributedError when the peer closes.
// Decision: plain POSIX sockets + poll(2), no threads of their own; IPv4 and IPv6 via
// getaddrinfo.
//
//   Socket s = Socket::connect("127.0.0.1", 29500, deadline, "TcpStore");
//   s.send_all(buf, n, deadline);
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mg::distributed::detail {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Connects to host:port, retrying refused connections (the listener may not be up yet) until
  // `deadline`. `who` starts the error messages.
  static Socket connect(const std::string& host, int port, Clock::time_point deadline,
                        const std::string& who);
  // A listening socket on `host`:`port` (port 0: an ephemeral port; see port()).
  static Socket listen(const std::string& host, int port, const std::string& who);

  // Sends / receives exactly n bytes before the deadline.
  void send_all(const void* data, std::size_t n, Clock::time_point deadline) const;
  void recv_all(void* data, std::size_t n, Clock::time_point deadline) const;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int port() const;  // local port
  void close();

 private:
  int fd_ = -1;
};

// A free TCP port on the loopback interface: binds port 0 and reports what the kernel chose.
int find_free_port();

}  // namespace mg::distributed::detail
