// The TcpStore client (see tcp_store.h).
// Decision: one connection per store, one request in flight at a time (a mutex), each request
// bounded by the store's timeout; waiting for keys polls CHECK every kPollInterval.
#include "mixgrad/distributed/tcp_store.h"

#include <cstring>
#include <thread>

#include "mixgrad/distributed/error.h"
#include "mixgrad/distributed/tcp_store_server.h"

namespace mg::distributed {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(5);

void put_u32(std::vector<char>& m, uint32_t v) {
  const char* p = reinterpret_cast<const char*>(&v);
  m.insert(m.end(), p, p + 4);
}
void put_bytes(std::vector<char>& m, const char* data, std::size_t n) {
  MG_CHECK(n < (1u << 30), Error, "TcpStore: a key or value of ", n, " bytes is too long");
  put_u32(m, uint32_t(n));
  m.insert(m.end(), data, data + n);
}
void put_string(std::vector<char>& m, const std::string& s) { put_bytes(m, s.data(), s.size()); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  MG_CHECK(options_.port >= 0 && options_.port < 65536, Error, "TcpStore: port ", options_.port,
           " is not in [0, 65535]");
  MG_CHECK(options_.port != 0 || options_.is_server, Error,
           "TcpStore: a client needs the server's port, got 0");
  MG_CHECK(options_.timeout.count() > 0, Error, "TcpStore: the timeout must be positive, got ",
           options_.timeout.count(), " ms");
  port_ = options_.port;
  if (options_.is_server) {
    server_ = std::make_unique<TcpStoreServer>(options_.host, options_.port);
    port_ = server_->port();
  }
  const auto deadline = detail::Clock::now() + options_.timeout;
  try {
    conn_ = detail::Socket::connect(options_.host, port_, deadline, "TcpStore");
  } catch (const DistributedTimeoutError& e) {
    MG_THROW(distributed::DistributedTimeoutError, "TcpStore: no store server answered at ", where(), " within ",
             options_.timeout.count(), " ms (", e.what(), ")",
             "\n  hint: the store is hosted by rank 0; is it running, and are MASTER_ADDR and "
             "MASTER_PORT the same for every rank?");
  }
}

TcpStore::~TcpStore() = default;

std::string TcpStore::where() const { return options_.host + ":" + std::to_string(port_); }

std::vector<char> TcpStore::request(const std::vector<char>& msg) {
  const auto deadline = detail::Clock::now() + options_.timeout;
  MG_CHECK(conn_.valid(), distributed::DistributedError, "TcpStore: the connection to ", where(),
           " was lost earlier");
  try {
    conn_.send_all(msg.data(), msg.size(), deadline);
    std::vector<char> reply;
    switch (StoreCommand(msg[0])) {
      case StoreCommand::Set:
        reply.resize(1);
        conn_.recv_all(reply.data(), 1, deadline);
        break;
      case StoreCommand::Get: {
        char head[5];
        conn_.recv_all(head, 5, deadline);
        uint32_t len;
        std::memcpy(&len, head + 1, 4);
        reply.resize(1 + len);
        reply[0] = head[0];
        if (len) conn_.recv_all(reply.data() + 1, len, deadline);
        break;
      }
      case StoreCommand::Add:
        reply.resize(8);
        conn_.recv_all(reply.data(), 8, deadline);
        break;
      case StoreCommand::Check: {
        uint32_t n;
        conn_.recv_all(&n, 4, deadline);
        reply.resize(4 + 4 * std::size_t(n));
        std::memcpy(reply.data(), &n, 4);
        if (n) conn_.recv_all(reply.data() + 4, 4 * std::size_t(n), deadline);
        break;
      }
    }
    return reply;
  } catch (const DistributedTimeoutError& e) {
    conn_.close();
    MG_THROW(distributed::DistributedTimeoutError, "TcpStore: the server at ", where(), " did not answer within ",
             options_.timeout.count(), " ms");
  } catch (const DistributedError& e) {
    conn_.close();
    MG_THROW(distributed::DistributedError, "TcpStore: lost the connection to the store at ", where(), " (",
             e.what(), ")\n  hint: the store lives in rank 0's process; did rank 0 exit?");
  }
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<char> m{char(StoreCommand::Set)};
  put_string(m, key);
  put_bytes(m, value.data(), value.size());
  request(m);
}

void TcpStore::set(const std::string& key, const std::string& value) {
  set(key, std::vector<char>(value.begin(), value.end()));
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key});
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<char> m{char(StoreCommand::Get)};
  put_string(m, key);
  std::vector<char> r = request(m);
  MG_CHECK(r[0] == 1, distributed::DistributedError, "TcpStore: key '", key, "' vanished");
  return std::vector<char>(r.begin() + 1, r.end());
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<char> m{char(StoreCommand::Add)};
  put_string(m, key);
  const char* p = reinterpret_cast<const char*>(&delta);
  m.insert(m.end(), p, p + 8);
  std::vector<char> r = request(m);
  int64_t v;
  std::memcpy(&v, r.data(), 8);
  return v;
}

std::vector<std::string> TcpStore::missing(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<char> m{char(StoreCommand::Check)};
  put_u32(m, uint32_t(keys.size()));
  for (const auto& k : keys) put_string(m, k);
  std::vector<char> r = request(m);
  uint32_t n;
  std::memcpy(&n, r.data(), 4);
  std::vector<std::string> out;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t idx;
    std::memcpy(&idx, r.data() + 4 + 4 * i, 4);
    MG_CHECK(idx < keys.size(), distributed::DistributedError, "TcpStore: malformed reply from ", where());
    out.push_back(keys[idx]);
  }
  return out;
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = detail::Clock::now() + timeout;
  for (;;) {
    std::vector<std::string> left = missing(keys);
    if (left.empty()) return;
    if (detail::Clock::now() >= deadline) {
      MG_THROW(distributed::DistributedTimeoutError, "TcpStore: timed out after ", timeout.count(),
               " ms waiting for ", left.size(), " of ", keys.size(), " keys: ", join(left));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace mg::distributed
