// A small data-parallel training loop in which rank 1 fails at step 20, in the way argv[1] names:
//   throw   an uncaught exception        kill  SIGKILL (as the OOM killer would)
//   exit    returns from main early      ok    no failure: every rank finishes
//   stop    SIGSTOP: alive but silent (as a hung host or a lost link)
//   sleep   computes alone for argv[2] seconds (as a long evaluation), then goes on
//   uneven  runs out of data: 10 steps fewer, then an all_sum of its accuracy
// Its collective is all_sum, or the one FAULT_COLLECTIVE names (all_to_all, broadcast, barrier).
// fault_test.sh runs it under mpirun and checks that a failure ends the whole job, quickly.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <stdexcept>
#include <string>

#include "loom/loom.h"

using namespace loom;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const char* env = std::getenv("FAULT_COLLECTIVE");
  const std::string collective = env ? env : "all_sum";
  auto world = distributed::init();
  array w = zeros({64, 64});
  array x = ones({32, 64});
  const int steps = mode == "uneven" && world.rank() == 1 ? 190 : 200;
  for (int step = 0; step < steps; ++step) {
    if (world.rank() == 1 && step == 20) {
      if (mode == "throw") throw std::runtime_error("boom at step 20");
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "exit") return 0;
      if (mode == "stop") std::raise(SIGSTOP);
      if (mode == "sleep") std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[2])));
    }
    array local = matmul(transpose(x), tanh(matmul(x, w)));
    if (collective == "barrier") distributed::barrier();
    array g = collective == "all_to_all" ? distributed::all_to_all(local)
              : collective == "broadcast" ? distributed::broadcast(local, 0)
              : collective == "barrier"   ? local
                                          : distributed::all_sum(local) / float(world.size());
    w = w - 0.01f * g;
    eval(w);
  }
  if (mode == "uneven") eval(distributed::all_sum(array(1.0f)));
  if (world.rank() == 0) std::printf("finished 200 steps\n");
  return 0;
}
