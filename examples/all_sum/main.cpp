// The smallest distributed Loom program: every process adds up a vector of ones.
//   ./all_sum                 -> one process:  0/1: array([1, 1, ...])
//   mpirun -np 4 ./all_sum    -> four processes, each printing the sum over all of them (4s)
#include <loom/loom.h>

#include <iostream>

using namespace loom;

int main() {
  auto world = distributed::init();            // joins MPI when started by mpirun, else a group of 1
  array x = distributed::all_sum(ones({10}));  // lazy: a node in the graph
  eval(x);                                     // the collective runs here, on every process
  std::cout << world.rank() << "/" << world.size() << ": " << x << std::endl;
}
