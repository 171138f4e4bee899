// optim::clip_grad_norm_sharded: alone and under mpirun -np 2 / 3 / 4, the gradients of a model
// spread over the ranks (parts of sharded gradients, replicated others) clip as the whole model's
// gradients do, with the same norm on every rank; over one axis of a mesh, the other axis's copies
// are counted once.
#include "../test_utils.h"
#include "loom/distributed/distributed.h"
#include "loom/ops/ops.h"
#include "loom/optim/clip.h"

using namespace loom;
namespace dist = loom::distributed;

namespace {

// The whole model's gradients: "w" (4n rows, where n is the group's size) and "b", replicated.
nn::ParamTree whole(int n) {
  nn::ParamTree g;
  g.insert("w", reshape(sin(arange(0.0, 12.0 * n, 1.0, float32)), {4 * n, 3}));
  g.insert("b", array({0.5f, -2.0f, 1.5f}));
  return g;
}

// Rank r's part: rows [4r, 4r + 4) of w, and all of b.
nn::ParamTree part(const nn::ParamTree& g, int r) {
  nn::ParamTree p;
  p.insert("w", slice(g.at("w"), {4 * r, 0}, {4 * r + 4, 3}));
  p.insert("b", g.at("b"));
  return p;
}

void expect_clips_as_whole(const dist::Group& group, double max_norm) {
  const int n = group.size(), r = group.rank();
  const nn::ParamTree full = whole(n);
  auto [want, want_norm] = optim::clip_grad_norm(full, max_norm);
  auto [got, got_norm] = optim::clip_grad_norm_sharded(part(full, r), max_norm, {"w"}, group);
  EXPECT_NEAR(got_norm.item<float>(), want_norm.item<float>(), 1e-5 * want_norm.item<float>()) << "max_norm " << max_norm;
  const nn::ParamTree mine = part(want, r);
  for (const auto& [name, g] : got) {
    EXPECT_TRUE(allclose(g, mine.at(name), 1e-5, 1e-6).item<bool>()) << name << ", max_norm " << max_norm << ": " << g;
  }
}

}  // namespace

TEST(ClipGradNormSharded, ClipsAsTheWholeModel) {
  auto world = dist::init();
  for (double max_norm : {0.5, 1.0, 100.0}) expect_clips_as_whole(world, max_norm);  // clipped and not
  // Over the tp axis of every dp x tp mesh: the dp copies of a tp group's parts are counted once.
  for (int dp = 1; dp <= world.size(); ++dp) {
    if (world.size() % dp != 0) continue;
    const dist::Mesh mesh({{"dp", dp}, {"tp", world.size() / dp}});
    expect_clips_as_whole(mesh.group("tp"), 1.0);
  }
  EXPECT_THROW_MSG(optim::clip_grad_norm_sharded(whole(1), 1.0, {"v"}), std::invalid_argument,
                   "[clip_grad_norm_sharded] 'v' is listed as sharded but is not among the gradients");
  EXPECT_THROW_MSG(optim::clip_grad_norm_sharded(whole(1), -1.0, {"w"}), std::invalid_argument,
                   "[clip_grad_norm_sharded] max_norm must be finite and >= 0");
}
