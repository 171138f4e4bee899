#include "loom/core/serialize.h"

#include <mutex>
#include <unordered_map>

namespace loom::detail {

void Reader::get_one(Dtype& d) {
  const std::string name = get<std::string>();
  for (Dtype t : all_dtypes) {
    if (to_string(t) == name) {
      d = t;
      return;
    }
  }
  if (name == to_string(complex64)) {  // (all_dtypes lists the real dtypes)
    d = complex64;
    return;
  }
  fail("'" + name.substr(0, 32) + "' is not a dtype");
}

namespace {
struct Loaders {
  std::mutex mu;
  std::unordered_map<std::string, PrimitiveLoader> by_name;
};
Loaders& loaders() {
  static Loaders* l = new Loaders;  // never destroyed: registrations run at static initialization
  return *l;
}
}  // namespace

bool register_primitive(const char* name, PrimitiveLoader load) {
  Loaders& l = loaders();
  std::lock_guard<std::mutex> lock(l.mu);
  l.by_name.emplace(name, load);
  return true;
}

PrimitiveLoader primitive_loader(const std::string& name) {
  Loaders& l = loaders();
  std::lock_guard<std::mutex> lock(l.mu);
  auto it = l.by_name.find(name);
  return it == l.by_name.end() ? nullptr : it->second;
}

}  // namespace loom::detail
