// A one-rank Gloo group hosting its own store on a free loopback port, for the tests that need a
// real group inside one process.
#pragma once
#include <chrono>
#include <memory>

#include "distributed/gloo_process_group.h"
#include "distributed/tcp_store.h"

namespace mg::test {

inline std::shared_ptr<distributed::ProcessGroupGloo> solo_group() {
  using namespace std::chrono_literals;
  auto store = std::make_shared<distributed::TcpStore>(
      distributed::TcpStoreOptions{.port = 0, .is_server = true, .timeout = 10s});
  return std::make_shared<distributed::ProcessGroupGloo>(store, 0, 1, distributed::GlooOptions{.timeout = 10s});
}

}  // namespace mg::test
