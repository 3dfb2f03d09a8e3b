// ProcessGroupGloo with one rank, in this process: the collectives' identities and every input
// check (dtype, root, shapes, ranks), and init_process_group's environment parsing.
#include <catch2/catch.hpp>

#include "distributed/solo_group.h"
#include "distributed/thrown.h"

#include "core/factory.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "ops/ops.h"

using namespace mg;
using namespace mg::distributed;
using namespace std::chrono_literals;

TEST_CASE("ProcessGroupGloo with one rank: collectives return the input", "[distributed]") {
  auto pg = test::solo_group();
  CHECK(pg->rank() == 0);
  CHECK(pg->world_size() == 1);
  CHECK(pg->backend() == "gloo");
  Tensor x = from_vector<float>({1.5f, -2.f, 3.f});
  pg->all_reduce(x, ReduceOp::Avg);
  CHECK(x.data<float>()[1] == -2.f);
  Tensor h = from_vector<float>({65504.f, 1.f}).to(DType::F16);
  pg->all_reduce(h, ReduceOp::Sum);
  CHECK(h.dtype() == DType::F16);
  CHECK(h.to(DType::F32).data<float>()[0] == 65504.f);
  Tensor g = pg->all_gather(from_vector<int64_t>({7, 8}));
  CHECK(g.shape() == Shape{1, 2});
  CHECK(g.data<int64_t>()[1] == 8);
  Tensor s = pg->reduce_scatter(from_vector<double>({1, 2, 3}), ReduceOp::Max);
  CHECK(s.shape() == Shape{3});
  CHECK(s.data<double>()[2] == 3.0);
  Tensor e = empty({0, 4});
  pg->all_reduce(e);
  CHECK(pg->all_gather(e).shape() == Shape{1, 0, 4});
  pg->barrier();
  pg->shutdown();
}

TEST_CASE("ProcessGroupGloo refuses bad inputs with clear errors", "[distributed]") {
  auto pg = test::solo_group();
  Tensor b = zeros({3}, {.dtype = DType::Bool});
  CHECK_THAT(mg::test::thrown<DTypeError>([&] { pg->all_reduce(b); }),
             Catch::Matchers::Contains("ProcessGroupGloo::all_reduce: sum takes f64, f32, f16, bf16, i64 or i32 tensors, got [3] bool cpu"));
  Tensor i = zeros({2}, {.dtype = DType::I64});
  CHECK_THAT(mg::test::thrown<DTypeError>([&] { pg->all_reduce(i, ReduceOp::Avg); }),
             Catch::Matchers::Contains("avg needs a floating tensor"));
  CHECK_THAT(mg::test::thrown<DTypeError>([&] { pg->reduce_scatter(zeros({3}, {.dtype = DType::U8})); }),
             Catch::Matchers::Contains("reduce_scatter"));
  Tensor x = zeros({2});
  CHECK_THROWS_WITH(pg->broadcast(x, 1), Catch::Contains("root 1 is not a rank in [0, 1)"));
  CHECK_THROWS_AS(pg->reduce_scatter(scalar_tensor(1.0)), ShapeError);
  Tensor undefined;
  CHECK_THROWS_WITH(pg->all_reduce(undefined), Catch::Contains("the tensor is undefined"));
  // Still usable after refused inputs (nothing was sent).
  pg->all_reduce(x);
  pg->shutdown();
  CHECK_THAT(mg::test::thrown<DistributedError>([&] { pg->all_reduce(x); }),
             Catch::Matchers::Contains("shut down"));

  auto store = std::make_shared<TcpStore>(TcpStoreOptions{.port = 0, .is_server = true, .timeout = 5s});
  CHECK_THROWS_WITH(ProcessGroupGloo(store, 2, 2), Catch::Contains("rank 2 is not in [0, 2)"));
  CHECK_THROWS_WITH(ProcessGroupGloo(store, 0, 0), Catch::Contains("world size must be >= 1"));
}

TEST_CASE("init_process_group reads and checks the environment", "[distributed]") {
  std::map<std::string, std::string> v{{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29511"},
                                       {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "2"}};
  DistributedEnv e = env_from(v);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29511);
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  auto without = [&](const std::string& k) {
    auto c = v;
    c.erase(k);
    return c;
  };
  auto single_machine = without("LOCAL_RANK");
  single_machine.erase("LOCAL_WORLD_SIZE");
  DistributedEnv d = env_from(single_machine);
  CHECK(d.local_rank == 3);
  CHECK(d.local_world_size == 4);
  CHECK_THROWS_WITH(env_from(without("LOCAL_RANK")),
                    Catch::Contains("LOCAL_RANK=3 is not below LOCAL_WORLD_SIZE=2"));
  for (const char* k : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) {
    CHECK_THROWS_WITH(env_from(without(k)), Catch::Contains(std::string("environment variable ") + k + " is not set") &&
                                                Catch::Contains("hint: start the program with mixgrad-run"));
  }
  auto with = [&](const std::string& k, const std::string& val) {
    auto c = v;
    c[k] = val;
    return c;
  };
  CHECK_THROWS_WITH(env_from(with("RANK", "4")), Catch::Contains("RANK=4 is not below WORLD_SIZE=4"));
  CHECK_THROWS_WITH(env_from(with("WORLD_SIZE", "four")),
                    Catch::Contains("WORLD_SIZE='four' is not an integer in [1, 1048576]"));
  CHECK_THROWS_WITH(env_from(with("MASTER_PORT", "0")), Catch::Contains("MASTER_PORT='0'"));
  CHECK_THROWS_WITH(init_process_group(e, {.backend = "mpi"}),
                    Catch::Contains("backend 'mpi' is not available; this build has: gloo"));
}
