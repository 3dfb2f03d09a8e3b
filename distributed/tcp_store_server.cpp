// The TcpStore server loop (see tcp_store_server.h).
// Decision: each request must arrive whole within kRequestDeadline of its first byte; the map is
// touched only by the server thread, so it needs no lock.
#include "mixgrad/distributed/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <list>

#include "mixgrad/distributed/error.h"

namespace mg::distributed {
namespace {

constexpr auto kRequestDeadline = std::chrono::seconds(10);
constexpr uint32_t kMaxLength = 1u << 30;  // a longer key or value is a malformed request

uint32_t read_u32(const detail::Socket& s, detail::Clock::time_point dl) {
  uint32_t v;
  s.recv_all(&v, 4, dl);
  if (v > kMaxLength) MG_THROW(distributed::DistributedError, "TcpStore server: malformed request");
  return v;
}

std::string read_string(const detail::Socket& s, detail::Clock::time_point dl) {
  std::string str(read_u32(s, dl), '\0');
  if (!str.empty()) s.recv_all(str.data(), str.size(), dl);
  return str;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  listener_ = detail::Socket::listen(host, port, "TcpStore server");
  port_ = listener_.port();
  if (::pipe2(wake_, O_CLOEXEC) != 0) MG_THROW(distributed::DistributedError, "TcpStore server: pipe failed");
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  char c = 'x';
  [[maybe_unused]] ssize_t n = ::write(wake_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpStoreServer::serve() {
  std::list<detail::Socket> clients;
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const auto& c : clients) fds.push_back({c.fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) clients.emplace_back(fd);
    }
    std::size_t i = 2;
    for (auto it = clients.begin(); it != clients.end() && i < fds.size(); ++i) {
      if (fds[i].revents && !handle(*it)) {
        it = clients.erase(it);
      } else {
        ++it;
      }
    }
  }
}

bool TcpStoreServer::handle(const detail::Socket& c) {
  try {
    const auto dl = detail::Clock::now() + kRequestDeadline;
    uint8_t cmd;
    c.recv_all(&cmd, 1, dl);
    switch (StoreCommand(cmd)) {
      case StoreCommand::Set: {
        std::string key = read_string(c, dl);
        std::string value = read_string(c, dl);
        data_[key] = std::vector<char>(value.begin(), value.end());
        uint8_t ok = 1;
        c.send_all(&ok, 1, dl);
        return true;
      }
      case StoreCommand::Get: {
        std::string key = read_string(c, dl);
        auto it = data_.find(key);
        uint8_t found = it != data_.end();
        uint32_t len = found ? uint32_t(it->second.size()) : 0;
        std::vector<char> out(5 + len);
        out[0] = char(found);
        std::memcpy(out.data() + 1, &len, 4);
        if (len) std::memcpy(out.data() + 5, it->second.data(), len);
        c.send_all(out.data(), out.size(), dl);
        return true;
      }
      case StoreCommand::Add: {
        std::string key = read_string(c, dl);
        int64_t delta;
        c.recv_all(&delta, 8, dl);
        int64_t value = 0;
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() == 8) std::memcpy(&value, it->second.data(), 8);
        value += delta;
        std::vector<char> bytes(8);
        std::memcpy(bytes.data(), &value, 8);
        data_[key] = bytes;
        c.send_all(&value, 8, dl);
        return true;
      }
      case StoreCommand::Check: {
        uint32_t n = read_u32(c, dl);
        std::vector<uint32_t> out{0};
        for (uint32_t k = 0; k < n; ++k) {
          if (!data_.count(read_string(c, dl))) out.push_back(k);
        }
        out[0] = uint32_t(out.size() - 1);
        c.send_all(out.data(), out.size() * 4, dl);
        return true;
      }
    }
    return false;  // unknown command
  } catch (const Error&) {
    return false;  // the client closed, stalled or sent garbage: drop it
  }
}

}  // namespace mg::distributed
