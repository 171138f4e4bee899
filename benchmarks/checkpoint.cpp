// checkpoint_io: saving and loading a 100 MB checkpoint (optim::save_checkpoint /
// optim::load_checkpoint), and CRC-32 alone over the same bytes, the share of the checksums.
//
// The model: 24 nn::Linear(1024, 1024) layers, 25,190,400 float32 parameters (100.8 MB), with an
// AdamW that has not stepped (no state). The file goes to DIR (default /dev/shm when writable, else
// the temporary directory): in RAM, so that the figures are the CPU's cost and not the disk's;
// save ends with fsync either way. 1 warm-up, then 7 rounds (QUICK=1: 3) of save then load; each
// line is the median wall time. `crc32` is zlib's crc32_z over one 100.8 MB buffer, the work the
// checksums add to each save and each load.
#include <loom/loom.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <string>

#include "bench.h"

using namespace loom;

namespace {

struct Big : nn::Module {
  std::vector<std::unique_ptr<nn::Linear>> layers;
  Big() {
    for (int i = 0; i < 24; ++i) {
      layers.push_back(std::make_unique<nn::Linear>(1024, 1024));
      register_module("l" + std::to_string(i), *layers.back());
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  if (::access("/dev/shm", W_OK) == 0) dir = "/dev/shm";
  if (argc > 1) dir = argv[1];
  const std::string path = (dir / ("loom_bench_checkpoint_" + std::to_string(::getpid()) + ".safetensors")).string();
  const int rounds = bench::quick() ? 3 : 7;

  Big model;
  optim::AdamW opt(1e-3);
  eval(model.parameters());
  size_t bytes = 0;
  for (const auto& [name, p] : model.parameters()) bytes += p.nbytes();

  std::vector<double> save_ms, load_ms, crc_ms;
  for (int r = 0; r <= rounds; ++r) {
    double t0 = bench::now_ms();
    optim::save_checkpoint(path, model, opt);
    double t1 = bench::now_ms();
    optim::load_checkpoint(path, model, opt);
    eval(model.parameters());
    double t2 = bench::now_ms();
    if (r > 0) {
      save_ms.push_back(t1 - t0);
      load_ms.push_back(t2 - t1);
    }
  }
  std::filesystem::remove(path);

  std::vector<unsigned char> buf(bytes, 0x5a);
  unsigned long sink = 0;
  for (int r = 0; r <= rounds; ++r) {
    double t0 = bench::now_ms();
    sink ^= crc32_z(0, buf.data(), buf.size());
    if (r > 0) crc_ms.push_back(bench::now_ms() - t0);
  }
  const double mb = bytes / 1e6;
  std::printf("{\"workload\":\"checkpoint_io\",\"op\":\"save\",\"mb\":%.1f,\"median_ms\":%.1f}\n", mb, bench::median(save_ms));
  std::printf("{\"workload\":\"checkpoint_io\",\"op\":\"load\",\"mb\":%.1f,\"median_ms\":%.1f}\n", mb, bench::median(load_ms));
  std::printf("{\"workload\":\"checkpoint_io\",\"op\":\"crc32\",\"mb\":%.1f,\"median_ms\":%.1f}\n", mb, bench::median(crc_ms));
  std::fprintf(stderr, "file in %s; %d rounds (crc %lx)\n", dir.c_str(), rounds, sink);
  return 0;
}
