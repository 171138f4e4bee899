// einsum and einsum_path (ops/ops.h), as MLX and numpy: the subscripts are parsed and checked, a
// contraction order is chosen (numpy's and opt_einsum's greedy rule: at each step, the pair whose
// result frees the most elements, then the cheaper), and each step is lowered to Loom's ops: a
// diagonal for a repeated subscript, a sum for an axis no other term needs, a batched matmul (by
// transpose and reshape) for a pair that contracts, a broadcast multiply and sum otherwise. The
// derivatives are those of the ops it lowers to.
#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

// A term: its subscript letters, in axis order (repeats allowed in inputs).
struct Term {
  std::string s;
  bool has(char c) const { return s.find(c) != std::string::npos; }
  std::set<char> letters() const { return {s.begin(), s.end()}; }
};

// One step of the path: the positions (into the current list of operands, ascending) it takes,
// their terms, and the term of its result (appended to the list).
struct Step {
  std::vector<int> positions;
  std::vector<Term> inputs;
  Term output;
};

struct Parsed {
  std::vector<Term> inputs;
  Term output;
  std::map<char, int64_t> dims;  // each letter's size (broadcast over the size-1 ones)
};

// Splits "ab,bc->ac" (spaces ignored); without "->", the output is the letters seen once, sorted,
// after the ellipsis if any (numpy's implicit mode).
std::pair<std::vector<std::string>, std::string> split_subscripts(std::string sub, bool& explicit_output) {
  sub.erase(std::remove(sub.begin(), sub.end(), ' '), sub.end());
  std::string lhs = sub, rhs;
  const size_t arrow = sub.find("->");
  explicit_output = arrow != std::string::npos;
  if (explicit_output) {
    lhs = sub.substr(0, arrow);
    rhs = sub.substr(arrow + 2);
  }
  std::vector<std::string> terms;
  std::string cur;
  for (char c : lhs) {
    if (c == ',') {
      terms.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!lhs.empty() || sub.find(',') != std::string::npos) terms.push_back(cur);
  if (!explicit_output) {
    std::map<char, int> count;
    for (char c : lhs) {
      if (std::isalpha(static_cast<unsigned char>(c))) ++count[c];
    }
    if (lhs.find("...") != std::string::npos) rhs = "...";
    for (auto [c, n] : count) {
      if (n == 1) rhs += c;
    }
  }
  return {terms, rhs};
}

Parsed parse(const std::string& subscripts, const std::vector<array>& operands, const char* op) {
  if (operands.empty()) throw std::invalid_argument(msg("[", op, "] needs at least one operand"));
  bool explicit_output = false;
  auto [terms, out] = split_subscripts(subscripts, explicit_output);
  if (terms.size() != operands.size()) {
    throw std::invalid_argument(msg("[", op, "] the subscripts \"", subscripts, "\" name ", terms.size(),
                                    " operands but ", operands.size(), " were given"));
  }
  // Letters for the axes an ellipsis stands for: unused ones, taken from the end so that operands
  // with fewer axes line up on the right (broadcasting).
  std::string spare;
  for (char c = 'a'; c <= 'z'; ++c) {
    if (subscripts.find(c) == std::string::npos) spare += c;
  }
  for (char c = 'A'; c <= 'Z'; ++c) {
    if (subscripts.find(c) == std::string::npos) spare += c;
  }
  int widest = 0;
  auto expand = [&](std::string& t, const array* a, int which) {
    size_t dots = std::string::npos;
    int letters = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (std::isalpha(static_cast<unsigned char>(t[i]))) {
        ++letters;
        continue;
      }
      if (t.compare(i, 3, "...") != 0) {
        throw std::invalid_argument(msg("[", op, "] subscripts must be letters (or one \"...\"); got '", t[i], "' in \"",
                                        subscripts, "\""));
      }
      if (dots != std::string::npos) {
        throw std::invalid_argument(msg("[", op, "] \"", t, "\" has more than one ellipsis"));
      }
      dots = i;
      i += 2;
    }
    if (dots == std::string::npos) return;
    int n = widest;
    if (a) {
      n = static_cast<int>(a->ndim()) - letters;
      if (n < 0) {
        throw std::invalid_argument(msg("[", op, "] operand ", which, " of shape ", shape_str(a->shape()),
                                        " has too few axes for \"", t, "\" (", letters, " besides the ellipsis)"));
      }
      widest = std::max(widest, n);
    }
    if (n > static_cast<int>(spare.size())) throw std::invalid_argument(msg("[", op, "] too many axes for the ellipsis"));
    t.replace(dots, 3, spare.substr(spare.size() - n));
  };
  for (size_t i = 0; i < terms.size(); ++i) expand(terms[i], &operands[i], static_cast<int>(i));
  expand(out, nullptr, -1);

  Parsed p;
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string& t = terms[i];
    const array& a = operands[i];
    if (t.size() != a.ndim()) {
      throw std::invalid_argument(msg("[", op, "] \"", t, "\" has ", t.size(), " subscripts for operand ", i,
                                      " of shape ", shape_str(a.shape()), " (", a.ndim(), " axes)"));
    }
    std::map<char, int64_t> local;
    for (size_t ax = 0; ax < t.size(); ++ax) {
      const int64_t d = a.shape()[ax];
      auto [it, fresh] = local.insert({t[ax], d});
      if (!fresh && it->second != d) {
        throw std::invalid_argument(msg("[", op, "] the repeated subscript '", t[ax], "' of operand ", i, " (shape ",
                                        shape_str(a.shape()), ") spans axes of sizes ", it->second, " and ", d));
      }
      auto [g, first] = p.dims.insert({t[ax], d});
      if (!first && g->second != d && g->second != 1 && d != 1) {
        throw std::invalid_argument(msg("[", op, "] subscript '", t[ax], "' is ", g->second, " long elsewhere but ", d,
                                        " in operand ", i, " of shape ", shape_str(a.shape())));
      }
      g->second = std::max(g->second, d);
    }
    p.inputs.push_back({t});
  }
  std::set<char> seen;
  for (char c : out) {
    if (!seen.insert(c).second) throw std::invalid_argument(msg("[", op, "] the output repeats subscript '", c, "'"));
    if (!p.dims.count(c)) {
      throw std::invalid_argument(msg("[", op, "] the output's subscript '", c, "' is in no input"));
    }
  }
  p.output = {out};
  return p;
}

int64_t size_of(const std::set<char>& letters, const std::map<char, int64_t>& dims) {
  int64_t n = 1;
  for (char c : letters) n *= dims.at(c);
  return n;
}

// opt_einsum's flop count of contracting `letters` over `terms` operands.
int64_t flops(const std::set<char>& letters, bool inner, int terms, const std::map<char, int64_t>& dims) {
  return size_of(letters, dims) * (std::max(terms - 1, 1) + (inner ? 1 : 0));
}

struct PathCost {
  int64_t naive = 0, optimized = 0;
  size_t naive_scaling = 0, optimized_scaling = 0;
};

std::pair<int64_t, size_t> cost_of(const std::vector<Term>& inputs, const Term& output,
                                   const std::map<char, int64_t>& dims) {
  std::set<char> all;
  for (const auto& t : inputs) all.insert(t.s.begin(), t.s.end());
  bool inner = false;
  for (char c : all) inner |= !output.has(c);
  return {flops(all, inner, static_cast<int>(inputs.size()), dims), all.size()};
}

// numpy's greedy path. The candidates are kept in the order numpy keeps them (first every pair, then
// each new result against the others), and the first best one wins, so paths match numpy's and MLX's.
std::vector<Step> greedy(std::vector<Term> inputs, const Term& output, const std::map<char, int64_t>& dims,
                         int64_t cost_limit, int64_t memory_limit, PathCost& cost) {
  struct Candidate {
    int64_t freed;  // elements of the two inputs minus the result's
    int64_t cost;
    std::set<char> result;
    size_t letters;
    int x, y;
  };
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
    for (int j = i + 1; j < static_cast<int>(inputs.size()); ++j) pairs.emplace_back(i, j);
  }
  std::vector<Candidate> candidates;
  std::vector<Step> path;
  const size_t n_in = inputs.size();
  for (size_t step = 0; step + 1 < n_in; ++step) {
    auto consider = [&](int x, int y) {
      std::set<char> both = inputs[x].letters();
      for (char c : inputs[y].s) both.insert(c);
      std::set<char> result;  // the letters someone else still needs
      for (int k = 0; k < static_cast<int>(inputs.size()); ++k) {
        if (k == x || k == y) continue;
        for (char c : inputs[k].s) {
          if (both.count(c)) result.insert(c);
        }
      }
      for (char c : output.s) {
        if (both.count(c)) result.insert(c);
      }
      const int64_t new_size = size_of(result, dims);
      if (new_size > memory_limit) return;
      const int64_t freed = size_of(inputs[x].letters(), dims) + size_of(inputs[y].letters(), dims) - new_size;
      const int64_t c = flops(both, both.size() > result.size(), 2, dims);
      if (cost.optimized + c > cost_limit) return;
      candidates.push_back({freed, c, std::move(result), both.size(), x, y});
    };
    auto disjoint = [&](int x, int y) {
      for (char c : inputs[x].s) {
        if (inputs[y].has(c)) return false;
      }
      return true;
    };
    for (auto [x, y] : pairs) {
      if (!disjoint(x, y)) consider(x, y);  // outer products only when nothing else is left
    }
    if (candidates.empty()) {
      for (auto [x, y] : pairs) consider(x, y);
    }
    if (candidates.empty()) {  // the rest in one naive step
      std::vector<int> all(inputs.size());
      std::iota(all.begin(), all.end(), 0);
      auto [c, scaling] = cost_of(inputs, output, dims);
      cost.optimized += c;
      cost.optimized_scaling = std::max(cost.optimized_scaling, scaling);
      path.push_back({all, inputs, output});
      return path;
    }
    auto best_it = candidates.begin();
    for (auto it = candidates.begin(); it != candidates.end(); ++it) {
      if (it->freed > best_it->freed || (it->freed == best_it->freed && it->cost < best_it->cost)) best_it = it;
    }
    const Candidate best = *best_it;
    cost.optimized += best.cost;
    cost.optimized_scaling = std::max(cost.optimized_scaling, best.letters);
    // The result's axes: in order of appearance in the two inputs.
    Term result;
    for (const Term* t : {&inputs[best.x], &inputs[best.y]}) {
      for (char c : t->s) {
        if (best.result.count(c) && !result.has(c)) result.s += c;
      }
    }
    path.push_back({{best.x, best.y}, {inputs[best.x], inputs[best.y]}, result});
    inputs.erase(inputs.begin() + best.y);
    inputs.erase(inputs.begin() + best.x);
    inputs.push_back(result);
    std::vector<Candidate> kept;
    for (auto& c : candidates) {
      if (c.x == best.x || c.x == best.y || c.y == best.x || c.y == best.y) continue;
      c.x -= (c.x > best.x) + (c.x > best.y);
      c.y -= (c.y > best.x) + (c.y > best.y);
      kept.push_back(std::move(c));
    }
    candidates = std::move(kept);
    pairs.clear();
    for (int i = 0; i + 1 < static_cast<int>(inputs.size()); ++i) pairs.emplace_back(i, static_cast<int>(inputs.size()) - 1);
  }
  return path;
}

std::pair<std::vector<Step>, PathCost> plan(const std::string& subscripts, const std::vector<array>& operands,
                                            const char* op, Parsed& p) {
  p = parse(subscripts, operands, op);
  PathCost cost;
  std::tie(cost.naive, cost.naive_scaling) = cost_of(p.inputs, p.output, p.dims);
  std::vector<Step> path;
  if (p.inputs.size() <= 2) {
    std::vector<int> all(p.inputs.size());
    std::iota(all.begin(), all.end(), 0);
    path.push_back({all, p.inputs, p.output});
    cost.optimized = cost.naive;
    cost.optimized_scaling = cost.naive_scaling;
  } else {
    int64_t memory = size_of(p.output.letters(), p.dims);
    for (const auto& t : p.inputs) memory = std::max(memory, size_of(t.letters(), p.dims));
    path = greedy(p.inputs, p.output, p.dims, cost.naive, memory, cost);
    path.back().output = p.output;
  }
  return {path, cost};
}

// ---- lowering ----

// x with its repeated subscripts reduced to their diagonals ("ii" -> "i").
array take_diagonals(array x, std::string& t) {
  for (;;) {
    size_t a = std::string::npos, b = std::string::npos;
    for (size_t i = 0; i < t.size() && b == std::string::npos; ++i) {
      const size_t j = t.find(t[i], i + 1);
      if (j != std::string::npos) a = i, b = j;
    }
    if (b == std::string::npos) return x;
    const char c = t[a];
    x = diagonal(x, 0, static_cast<int>(a), static_cast<int>(b));  // the diagonal becomes the last axis
    t.erase(b, 1);
    t.erase(a, 1);
    t += c;
  }
}

// x transposed from letters `from` to letters `to` (a permutation of them).
array permute(const array& x, const std::string& from, const std::string& to) {
  if (from == to) return x;
  std::vector<int> order;
  for (char c : to) order.push_back(static_cast<int>(from.find(c)));
  return transpose(x, order);
}

// The pair (a, b) contracted by a batched matmul: batch letters (in both and kept), a's free letters,
// b's free letters; `out` gets the result's letters in that order.
array contract_pair(array a, const std::string& ta, array b, const std::string& tb, const Term& output,
                    const std::map<char, int64_t>& dims, std::string& out) {
  std::string batch, free_a, free_b, summed;
  for (char c : ta) {
    if (!output.has(c)) summed += c;
    else if (tb.find(c) != std::string::npos) batch += c;
    else free_a += c;
  }
  for (char c : tb) {
    if (output.has(c) && ta.find(c) == std::string::npos) free_b += c;
  }
  // Size-1 axes broadcast against the other operand's.
  auto widen = [&](const array& x, const std::string& t) {
    Shape s = x.shape();
    for (size_t i = 0; i < t.size(); ++i) {
      if (batch.find(t[i]) != std::string::npos || summed.find(t[i]) != std::string::npos) s[i] = static_cast<int>(dims.at(t[i]));
    }
    return s == x.shape() ? x : broadcast_to(x, s);
  };
  a = widen(a, ta);
  b = widen(b, tb);
  auto extent = [&](const std::string& letters, const array& x, const std::string& t) {
    int n = 1;
    for (char c : letters) n *= x.shape()[t.find(c)];
    return n;
  };
  Shape out_shape;
  for (char c : batch) out_shape.push_back(a.shape()[ta.find(c)]);
  for (char c : free_a) out_shape.push_back(a.shape()[ta.find(c)]);
  for (char c : free_b) out_shape.push_back(b.shape()[tb.find(c)]);
  Shape as, bs;
  for (char c : batch) as.push_back(a.shape()[ta.find(c)]), bs.push_back(b.shape()[tb.find(c)]);
  as.push_back(extent(free_a, a, ta));
  as.push_back(extent(summed, a, ta));
  bs.push_back(extent(summed, b, tb));
  bs.push_back(extent(free_b, b, tb));
  const array am = reshape(permute(a, ta, batch + free_a + summed), as);
  const array bm = reshape(permute(b, tb, batch + summed + free_b), bs);
  out = batch + free_a + free_b;
  return reshape(matmul(am, bm), out_shape);
}

// The terms multiplied together with broadcasting, then summed over what the output does not keep.
array multiply_all(const std::vector<array>& xs, const std::vector<std::string>& ts, const Term& output, std::string& out) {
  std::string all;
  for (const auto& t : ts) {
    for (char c : t) {
      if (all.find(c) == std::string::npos) all += c;
    }
  }
  std::optional<array> prod;
  for (size_t i = 0; i < xs.size(); ++i) {
    // Put the term's letters in `all`'s order, with size-1 axes for the letters it lacks.
    std::string present;
    for (char c : all) {
      if (ts[i].find(c) != std::string::npos) present += c;
    }
    array x = permute(xs[i], ts[i], present);
    Shape s;
    for (char c : all) s.push_back(ts[i].find(c) == std::string::npos ? 1 : x.shape()[present.find(c)]);
    x = reshape(x, s);
    prod = prod ? multiply(*prod, x) : x;
  }
  std::vector<int> sum_axes;
  out.clear();
  for (size_t i = 0; i < all.size(); ++i) {
    if (output.has(all[i])) out += all[i];
    else sum_axes.push_back(static_cast<int>(i));
  }
  return sum_axes.empty() ? *prod : sum(*prod, sum_axes);
}

}  // namespace

std::pair<std::vector<std::vector<int>>, std::string> einsum_path(const std::string& subscripts,
                                                                  const std::vector<array>& operands) {
  Parsed p;
  auto [path, cost] = plan(subscripts, operands, "einsum_path", p);
  std::vector<std::vector<int>> positions;
  for (const auto& s : path) positions.push_back(s.positions);
  std::ostringstream os;
  os << "  Complete contraction:  " << subscripts << "\n"
     << "         Naive scaling:  " << cost.naive_scaling << "\n"
     << "     Optimized scaling:  " << cost.optimized_scaling << "\n"
     << "      Naive FLOP count:  " << cost.naive << "\n"
     << "  Optimized FLOP count:  " << cost.optimized << "\n"
     << "   Theoretical speedup:  " << (cost.optimized ? double(cost.naive) / double(cost.optimized) : 1.0) << "\n"
     << "  Contractions:";
  for (const auto& s : path) {
    os << "\n    ";
    for (size_t i = 0; i < s.inputs.size(); ++i) os << (i ? "," : "") << s.inputs[i].s;
    os << "->" << s.output.s;
  }
  os << "\n";
  return {positions, os.str()};
}

array einsum(const std::string& subscripts, const std::vector<array>& operands, StreamOrDevice s) {
  OnStream on(s);
  Parsed p;
  const std::vector<Step> path = plan(subscripts, operands, "einsum", p).first;
  std::vector<array> xs = operands;
  std::vector<std::string> ts;
  for (const auto& t : p.inputs) ts.push_back(t.s);
  for (const Step& step : path) {
    std::vector<array> in;
    std::vector<std::string> tin;
    for (int pos : step.positions) {
      tin.push_back(ts[pos]);
      in.push_back(take_diagonals(xs[pos], tin.back()));
    }
    // An axis no other term of the step and not the output needs is summed right away.
    for (size_t i = 0; i < in.size(); ++i) {
      std::vector<int> axes;
      std::string kept;
      for (size_t ax = 0; ax < tin[i].size(); ++ax) {
        const char c = tin[i][ax];
        bool needed = step.output.has(c);
        for (size_t j = 0; j < in.size() && !needed; ++j) needed = j != i && tin[j].find(c) != std::string::npos;
        if (needed) kept += c;
        else axes.push_back(static_cast<int>(ax));
      }
      if (!axes.empty()) {
        in[i] = sum(in[i], axes);
        tin[i] = kept;
      }
    }
    std::string result;
    array r = [&] {
      bool contracts = false;
      if (in.size() == 2) {
        for (char c : tin[0]) contracts |= !step.output.has(c) && tin[1].find(c) != std::string::npos;
      }
      return contracts ? contract_pair(in[0], tin[0], in[1], tin[1], step.output, p.dims, result)
                       : multiply_all(in, tin, step.output, result);
    }();
    r = permute(r, result, step.output.s);
    // Broadcast a size-1 axis the output keeps to its full length (an input of size 1 against others).
    Shape full;
    for (char c : step.output.s) full.push_back(static_cast<int>(p.dims.at(c)));
    if (r.shape() != full && &step == &path.back()) r = broadcast_to(r, full);
    for (auto it = step.positions.rbegin(); it != step.positions.rend(); ++it) {
      xs.erase(xs.begin() + *it);
      ts.erase(ts.begin() + *it);
    }
    xs.push_back(r);
    ts.push_back(step.output.s);
  }
  return xs.front();
}

}  // namespace loom
