// TcpStore (distributed/tcp_store.*), in one process: set/get/add/missing between two clients,
// waits bounded by the timeout with the missing keys named, no server, and a server that went.
#include <catch2/catch.hpp>

#include "distributed/thrown.h"

#include <chrono>
#include <thread>

#include "distributed/error.h"
#include "distributed/tcp_store.h"

using namespace mg::distributed;
using namespace std::chrono_literals;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

TEST_CASE("TcpStore: clients share keys through the server", "[distributed]") {
  TcpStore server({.host = "127.0.0.1", .port = 0, .is_server = true, .timeout = 5s});
  REQUIRE(server.port() > 0);
  TcpStore client({.host = "127.0.0.1", .port = server.port(), .timeout = 5s});
  server.set("a", "hello");
  CHECK(client.get("a") == std::vector<char>{'h', 'e', 'l', 'l', 'o'});
  client.set("empty", std::vector<char>{});
  CHECK(server.get("empty").empty());
  client.set("a", "overwritten");
  CHECK(std::string(server.get("a").data(), 11) == "overwritten");
  CHECK(client.add("counter", 5) == 5);
  CHECK(server.add("counter", -2) == 3);
  CHECK(client.missing({"a", "b", "counter", "c"}) == std::vector<std::string>{"b", "c"});
  // get() waits for a key another client sets later.
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    server.set("late", "x");
  });
  CHECK(client.get("late") == std::vector<char>{'x'});
  later.join();
}

TEST_CASE("TcpStore: a wait names the missing keys when the timeout passes", "[distributed]") {
  TcpStore server({.host = "127.0.0.1", .port = 0, .is_server = true, .timeout = 5s});
  server.set("k0", "1");
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(mg::test::thrown<DistributedTimeoutError>([&] { server.wait({"k0", "k1", "k2"}, 300ms); }),
             Catch::Matchers::Contains("timed out after 300 ms waiting for 2 of 3 keys: k1, k2"));
  const double s = seconds_since(start);
  CHECK(s >= 0.29);
  CHECK(s < 3.0);
}

TEST_CASE("TcpStore: no server at the address is a timeout error naming it", "[distributed]") {
  const int port = detail::find_free_port();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(mg::test::thrown<DistributedTimeoutError>([&] { TcpStore({.host = "127.0.0.1", .port = port, .timeout = 400ms}); }),
             Catch::Matchers::Contains("no store server answered at 127.0.0.1:" + std::to_string(port)) &&
                           Catch::Matchers::Contains("hosted by rank 0"));
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("TcpStore: a server that went away is an error, not a hang", "[distributed]") {
  auto server = std::make_unique<TcpStore>(TcpStoreOptions{.host = "127.0.0.1", .port = 0, .is_server = true, .timeout = 5s});
  TcpStore client({.host = "127.0.0.1", .port = server->port(), .timeout = 2s});
  client.set("x", "1");
  server.reset();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(mg::test::thrown<DistributedError>([&] { client.set("y", "2"); }),
             Catch::Matchers::Contains("lost the connection to the store"));
  CHECK_THAT(mg::test::thrown<DistributedError>([&] { client.missing({"x"}); }),
             Catch::Matchers::Contains("was lost earlier"));
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("TcpStore: bad options are refused", "[distributed]") {
  CHECK_THROWS_WITH(TcpStore({.port = 70000}), Catch::Contains("port 70000 is not in [0, 65535]"));
  CHECK_THROWS_WITH(TcpStore({.port = 0}), Catch::Contains("a client needs the server's port"));
  CHECK_THROWS_WITH(TcpStore({.port = 1, .timeout = 0ms}), Catch::Contains("the timeout must be positive"));
}
