// Damaged files never crash the readers: every truncation is rejected, and every mutated byte
// either still parses or gives a std::runtime_error.
#include <random>

#include "io_test_helpers.h"

using namespace loom;

namespace {

template <typename Load>
void survive_damage(const std::string& good, Load load_fn) {
  size_t accepted = 0, rejected = 0;
  auto attempt = [&](const std::string& data) -> bool {
    std::istringstream in(data);
    try {
      load_fn(in);
      ++accepted;
      return true;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("'<stream>': "), std::string::npos) << e.what();
      ++rejected;
      return false;
    }
  };
  ASSERT_TRUE(attempt(good));
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(attempt(good.substr(0, n))) << "truncated to " << n;

  const std::string subs = std::string("\x00\x01\x7f\x80\xff 9-{}[]\"',():.eL<>|", 24);
  for (size_t i = 0; i < good.size(); ++i) {
    for (char c : subs) {
      std::string bad = good;
      bad[i] = c;
      attempt(bad);
    }
  }
  std::mt19937 rng(1234);
  for (int it = 0; it < 3000; ++it) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<char>(rng() & 0xff);
    if (rng() % 3 == 0) bad.resize(rng() % bad.size());
    attempt(bad);
  }
  EXPECT_GT(rejected, good.size());
  EXPECT_GT(accepted, 1u);  // e.g. a changed data byte is still a valid file
}

TEST(Fuzz, NpySurvivesDamage) {
  std::stringstream ss;
  save(ss, reshape(arange(6.0, float32), {2, 3}));
  survive_damage(ss.str(), [](std::istream& in) { load(in); });
  std::stringstream sb;
  save(sb, array({true, false, true}));
  survive_damage(sb.str(), [](std::istream& in) { load(in); });
}

TEST(Fuzz, SafetensorsSurvivesDamage) {
  std::stringstream ss;
  save_safetensors(ss, {{"a", array({1.0f, 2.0f})}, {"b", array(int64_t(3))}, {"c", zeros({0, 2}, bfloat16)}},
                   {{"k", "v"}});
  survive_damage(ss.str(), [](std::istream& in) { load_safetensors(in); });
}

}  // namespace
