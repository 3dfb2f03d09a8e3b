// Blocking TCP sockets with deadlines (see socket.h).
// Decision: every blocking step is a poll(2) with the time left to the deadline, so no call can
// wait longer than its caller allowed; EINTR is retried.
#include "mixgrad/distributed/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "mixgrad/distributed/error.h"

namespace mg::distributed::detail {
namespace {

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : int(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits until fd is ready for `events`; throws DistributedTimeoutError at the deadline.
void wait_ready(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return;
    if (r == 0) MG_THROW(distributed::DistributedTimeoutError, "socket: ", what, " timed out");
    if (errno != EINTR) MG_THROW(distributed::DistributedError, "socket: poll failed: ", std::strerror(errno));
  }
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int Socket::port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

namespace {
// connect(2) bounded by the deadline: non-blocking, then poll(2) for the time left. A blocking
// connect to an address that drops SYN packets (a wrong MASTER_ADDR) waits for the kernel's retries,
// about two minutes, whatever the timeout. The socket is left blocking, as before. False with
// errno set when it did not connect.
bool connect_before(int fd, const sockaddr* addr, socklen_t len, Clock::time_point deadline) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return ::connect(fd, addr, len) == 0;
  bool ok = ::connect(fd, addr, len) == 0;
  if (!ok && errno == EINPROGRESS) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, int(std::clamp<long long>(left, 0, 1000 * 1000)));
    if (ready > 0) {
      int err = 0;
      socklen_t n = sizeof(err);
      ok = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) == 0 && err == 0;
      if (!ok) errno = err != 0 ? err : errno;
    } else {
      errno = ready == 0 ? ETIMEDOUT : errno;
    }
  }
  const int saved = errno;
  ::fcntl(fd, F_SETFL, flags);
  errno = saved;
  return ok;
}
}  // namespace

Socket Socket::connect(const std::string& host, int port, Clock::time_point deadline,
                       const std::string& who) {
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port_s = std::to_string(port);
    int gai = ::getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
    if (gai != 0) {
      MG_THROW(distributed::DistributedError, who, ": cannot resolve ", host, ":", port, ": ", gai_strerror(gai),
               "\n  hint: check MASTER_ADDR");
    }
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      if (connect_before(fd, ai->ai_addr, ai->ai_addrlen, deadline)) {
        ::freeaddrinfo(res);
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return Socket(fd);
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (Clock::now() >= deadline) {
      MG_THROW(distributed::DistributedTimeoutError, who, ": could not connect to ", host, ":", port,
               " before the timeout (last error: ", last_error, ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Socket Socket::listen(const std::string& host, int port, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
  if (gai != 0) MG_THROW(distributed::DistributedError, who, ": cannot resolve ", host, ": ", gai_strerror(gai));
  std::string err = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      ::freeaddrinfo(res);
      return Socket(fd);
    }
    err = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  MG_THROW(distributed::DistributedError, who, ": cannot listen on ", host.empty() ? "*" : host, ":", port, ": ",
           err, "\n  hint: is MASTER_PORT in use by another job? pick a free port");
}

void Socket::send_all(const void* data, std::size_t n, Clock::time_point deadline) const {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    wait_ready(fd_, POLLOUT, deadline, "send");
    ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      MG_THROW(distributed::DistributedError, "socket: send failed: ", std::strerror(errno));
    }
    p += k;
    n -= std::size_t(k);
  }
}

void Socket::recv_all(void* data, std::size_t n, Clock::time_point deadline) const {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    wait_ready(fd_, POLLIN, deadline, "receive");
    ssize_t k = ::recv(fd_, p, n, 0);
    if (k == 0) MG_THROW(distributed::DistributedError, "socket: the peer closed the connection");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      MG_THROW(distributed::DistributedError, "socket: receive failed: ", std::strerror(errno));
    }
    p += k;
    n -= std::size_t(k);
  }
}

int find_free_port() {
  Socket s = Socket::listen("127.0.0.1", 0, "find_free_port");
  return s.port();
}

}  // namespace mg::distributed::detail
