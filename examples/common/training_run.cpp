#include "examples/common/training_run.h"

#include <cstdio>
#include <exception>
#include <iostream>

#include "amp/initialize.h"
#include "core/error.h"
#include "core/parallel.h"

namespace mg::example {

int run_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run(argc, argv);
  } catch (const FlagError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

bool parse_flags(Flags& flags, int argc, char** argv) {
  flags.parse(argc, argv);
  if (flags.help_requested()) {
    std::cout << flags.usage();
    return false;
  }
  MG_CHECK(flags.value("device") == "cpu", Error, "--device cuda: this build of mixgrad has no CUDA backend yet",
           "\n  hint: use --device cpu");
  if (flags.get_int("threads") > 0) set_num_threads(int(flags.get_int("threads")));
  return true;
}

void TrainingState::save(const std::string& path, const io::NamedStates& extra) const {
  io::NamedStates states{{"optimizer", optimizer.state_dict()}, {"scheduler", scheduler.state_dict()},
                         {"loader", loader.state()},           {"rng", generator_state(default_generator())},
                         {"amp", amp::state_dict()},            {"history", history.state()}};
  states.insert(states.end(), extra.begin(), extra.end());
  io::save_checkpoint(path, model, states);
}

void TrainingState::restore(const io::Checkpoint& ck) const {
  ck.restore_model(model);
  optimizer.load_state_dict(ck.state("optimizer"));
  scheduler.load_state_dict(ck.state("scheduler"));
  loader.load_state(ck.state("loader"));
  load_generator_state(default_generator(), ck.state("rng"));
  amp::load_state_dict(ck.state("amp"));
  history.load(ck.state("history"));
}

}  // namespace mg::example
