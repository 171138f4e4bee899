// vmap of the indexing and sorting primitives (take, take_along_axis, the scatters, gather,
// masked_scatter, as_strided, sort, argsort, topk, argpartition, searchsorted) against a loop over the
// batch: every input batched or not, the batch first, in the middle or last, op axes counted from
// either end, several index dtypes, and compositions with grad.
#include "helpers.h"

using namespace loom;
using loom::testing::as_vector_fn;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

namespace {

constexpr int kVmiBatch = 4;

// `shape` with the batch (kVmiBatch) inserted at `at` (-1: unbatched, `shape` itself).
Shape vmi_shape(Shape shape, int at) {
  if (at >= 0) shape.insert(shape.begin() + at, kVmiBatch);
  return shape;
}

array vmi_f32(const Shape& shape, unsigned seed, int at = -1) {
  return astype(lcg_uniform(vmi_shape(shape, at), -2.0, 2.0, seed), float32);
}

// Integer indices in [lo, hi) (lo < 0: some count from the end), in `dtype`.
array vmi_idx(const Shape& shape, int lo, int hi, unsigned seed, int at = -1, Dtype dtype = int32) {
  return astype(floor(lcg_uniform(vmi_shape(shape, at), lo, hi, seed)), dtype);
}

VectorFn vmi_three(const std::function<array(const array&, const array&, const array&)>& f) {
  return [f](const std::vector<array>& x) { return std::vector<array>{f(x[0], x[1], x[2])}; };
}

// The batch positions tried for an input of `ndim` dimensions: unbatched, first, middle, last.
std::vector<int> vmi_axes(int ndim) { return {-1, 0, (ndim + 1) / 2, ndim}; }

}  // namespace

TEST(IndexingVmap, TakeEveryBatchingOfArrayAndIndices) {
  const Shape as{3, 5, 2}, is{2, 3};
  for (int axis : {0, 1, -1, -2}) {
    auto f = as_vector_fn([axis](const array& a, const array& i) { return take(a, i, axis); });
    for (int aa : vmi_axes(3)) {
      for (int ia : vmi_axes(2)) {
        if (aa < 0 && ia < 0) continue;
        // [-2, 2) fits every axis of a: negative indices count from the end.
        expect_vmap_matches_loop(f, {vmi_f32(as, 1, aa), vmi_idx(is, -2, 2, 2, ia)}, {aa, ia});
      }
    }
  }
}

TEST(IndexingVmap, TakeIndexDtypesScalarAndFlatIndices) {
  const Shape as{3, 5};
  for (Dtype dt : {uint8, uint32, int32, int64}) {
    const array a = vmi_f32(as, 3, 1), i = vmi_idx({4}, 0, 3, 4, 0, dt);
    auto f = as_vector_fn([](const array& x, const array& j) { return take(x, j, 0); });
    expect_vmap_matches_loop(f, {a, i}, {1, 0});
    expect_vmap_matches_loop(f, {a, i}, {1, -1});
    expect_vmap_matches_loop(f, {a, i}, {-1, 0});
  }
  // 0-d indices per entry, and take over the flattened array.
  const array a = vmi_f32(as, 5, 0), j = vmi_idx({}, -5, 5, 6, 0);
  expect_vmap_matches_loop(as_vector_fn([](const array& x, const array& k) { return take(x, k, 1); }), {a, j}, {0, 0});
  const array flat = vmi_idx({2, 2}, -15, 15, 7, 2);
  expect_vmap_matches_loop(as_vector_fn([](const array& x, const array& k) { return take(x, k); }), {a, flat}, {0, 2});
  expect_vmap_matches_loop(as_vector_fn([](const array& x, const array& k) { return take(x, k); }), {a, flat}, {-1, 2});
  // Integer and complex arrays move through unchanged.
  const array ai = astype(vmi_idx(as, -50, 50, 8, 2), int64);
  expect_vmap_matches_loop(as_vector_fn([](const array& x, const array& k) { return take(x, k, 1); }),
                           {ai, vmi_idx({3}, 0, 5, 9, 0)}, {2, 0});
}

TEST(IndexingVmap, TakeOutOfBoundsStillThrows) {
  const array a = vmi_f32({3, 5}, 10, 0), i = full({kVmiBatch, 2}, 7, int32);
  auto f = as_vector_fn([](const array& x, const array& j) { return take(x, j, 1); });
  for (auto axes : std::vector<std::vector<int>>{{0, -1}, {-1, 0}, {0, 0}}) {
    std::vector<array> in{a, axes[1] < 0 ? array({1, 7}) : i};
    if (axes[0] < 0) in[0] = vmi_f32({3, 5}, 10);
    EXPECT_THROW(vmap(f, axes)(in)[0].eval(), std::out_of_range);
  }
}

TEST(IndexingVmap, TakeAlongAxis) {
  // a (3, 5) and indices (3, 2) along axis 1; indices (1, 5) broadcast along axis 0.
  for (int aa : vmi_axes(2)) {
    for (int ia : vmi_axes(2)) {
      if (aa < 0 && ia < 0) continue;
      expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& i) { return take_along_axis(a, i, 1); }),
                               {vmi_f32({3, 5}, 11, aa), vmi_idx({3, 2}, -5, 5, 12, ia)}, {aa, ia});
      expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& i) { return take_along_axis(a, i, -2); }),
                               {vmi_f32({3, 5}, 13, aa), vmi_idx({1, 5}, 0, 3, 14, ia, uint32)}, {aa, ia});
    }
  }
  // sort's values through argsort: the common use.
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return take_along_axis(a, argsort(a, 0), 0); }),
                           {vmi_f32({5, 3}, 15, 2)}, {2});
}

TEST(IndexingVmap, PutAlongAxisAndScatterAddAxis) {
  // Distinct indices for put (a write order cannot matter); repeats for the add.
  const array perm = astype(reshape(array({3, 0, 4, 1, 2, 2, 4, 0, 3, 1, 1, 3, 0, 2, 4, 0, 1, 2, 3, 4}), {4, 5}), int32);
  for (int aa : vmi_axes(2)) {
    for (int ia : {-1, 0, 2}) {
      for (int va : {-1, 1}) {
        if (aa < 0 && ia < 0 && va < 0) continue;
        // entry b's indices: row b of perm, the first 3 along axis 1 of a (3, 5).
        array idx = broadcast_to(expand_dims(slice(perm, {0, 0}, {4, 3}), 1), {4, 3, 3});
        idx = ia < 0 ? take(idx, 1, 0) : moveaxis(idx, 0, ia);
        const array v = vmi_f32({3, 3}, 16, va);
        expect_vmap_matches_loop(
            vmi_three([](const array& a, const array& i, const array& w) { return put_along_axis(a, i, w, 1); }),
            {vmi_f32({3, 5}, 17, aa), idx, v}, {aa, ia, va});
        expect_vmap_matches_loop(
            vmi_three([](const array& a, const array& i, const array& w) { return scatter_add_axis(a, i, w, -1); }),
            {vmi_f32({3, 5}, 18, aa), vmi_idx({3, 4}, -5, 5, 19, ia), vmi_f32({3, 4}, 20, va)}, {aa, ia, va});
      }
    }
  }
  // Values broadcast along the other axis, and integer arrays.
  expect_vmap_matches_loop(
      vmi_three([](const array& a, const array& i, const array& w) { return scatter_add_axis(a, i, w, 0); }),
      {astype(vmi_idx({4, 3}, -9, 9, 21, 0), int32), vmi_idx({2, 3}, 0, 4, 22, 2), array(3, int32)}, {0, 2, -1});
}

TEST(IndexingVmap, ScatterAddTake) {
  const Shape as{3, 5, 2};
  for (int axis : {0, 1, -1}) {
    const int ax = axis < 0 ? axis + 3 : axis;
    Shape us = as;  // take's shape for indices of shape (2, 3)
    us.erase(us.begin() + ax);
    us.insert(us.begin() + ax, {2, 3});
    auto f = vmi_three([axis](const array& a, const array& i, const array& u) { return scatter_add_take(a, i, u, axis); });
    for (int aa : {-1, 0, 2}) {
      for (int ia : {-1, 0, 2}) {
        for (int ua : {-1, 1, 4}) {
          if (aa < 0 && ia < 0 && ua < 0) continue;
          expect_vmap_matches_loop(f, {vmi_f32(as, 23, aa), vmi_idx({2, 3}, -2, 2, 24, ia), vmi_f32(us, 25, ua)},
                                   {aa, ia, ua});
        }
      }
    }
  }
  // Updates broadcast from a scalar, uint8 indices.
  expect_vmap_matches_loop(
      as_vector_fn([](const array& a, const array& i) { return scatter_add_take(a, i, array(1.0f), 1); }),
      {vmi_f32({3, 5}, 26, 1), vmi_idx({6}, 0, 5, 27, 0, uint8)}, {1, 0});
}

TEST(IndexingVmap, Gather) {
  const Shape as{4, 5, 6};
  // Two index arrays on axes 0 and 2 (shapes (3,) and (2, 1) broadcast), windows (1, 2, 2).
  auto f = [](const std::vector<array>& x) {
    return std::vector<array>{gather(x[0], {x[1], x[2]}, {0, -1}, {1, 2, 2})};
  };
  for (int aa : vmi_axes(3)) {
    for (int ia : {-1, 0, 1}) {
      for (int ja : {-1, 2}) {
        if (aa < 0 && ia < 0 && ja < 0) continue;
        expect_vmap_matches_loop(
            f, {vmi_f32(as, 28, aa), vmi_idx({3}, -4, 4, 29, ia), vmi_idx({2, 1}, 0, 5, 30, ja, int64)}, {aa, ia, ja});
      }
    }
  }
  // One index array, 0-d indices (a dynamic slice), and no index arrays at all.
  auto g = as_vector_fn([](const array& a, const array& i) { return gather(a, i, 1, {4, 2, 3}); });
  expect_vmap_matches_loop(g, {vmi_f32(as, 31, 3), vmi_idx({2, 2}, 0, 4, 32, 1, uint32)}, {3, 1});
  expect_vmap_matches_loop(g, {vmi_f32(as, 31, 1), vmi_idx({2, 2}, 0, 4, 32)}, {1, -1});
  auto ds = as_vector_fn([](const array& a, const array& s) { return slice(a, s, {0, 2}, Shape{2, 5, 3}); });
  expect_vmap_matches_loop(ds, {vmi_f32(as, 33, 0), vmi_idx({2}, 0, 3, 34, 1)}, {0, 1});
  expect_vmap_matches_loop(ds, {vmi_f32(as, 33), vmi_idx({2}, 0, 3, 34, 0)}, {-1, 0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return gather(a, std::vector<array>{}, {}, {2, 3, 1}); }),
                           {vmi_f32(as, 35, 2)}, {2});
}

TEST(IndexingVmap, ScatterEveryMode) {
  const Shape as{4, 5, 3};
  using ScatterFn = array (*)(const array&, const std::vector<array>&, const array&, const std::vector<int>&,
                              StreamOrDevice);
  const std::vector<ScatterFn> modes{scatter_add, scatter_prod, scatter_max, scatter_min};
  for (ScatterFn op : modes) {
    // Indices (2, 3) on axes 0 and 1; windows (1, 1, 3) after them: updates (2, 3, 1, 1, 3).
    auto f = [op](const std::vector<array>& x) {
      return std::vector<array>{op(x[0], {x[1], x[2]}, x[3], {0, -2}, {})};
    };
    for (int aa : {-1, 0, 3}) {
      for (int ia : {-1, 1}) {
        for (int ua : {-1, 0, 5}) {
          if (aa < 0 && ia < 0 && ua < 0) continue;
          expect_vmap_matches_loop(f,
                                   {vmi_f32(as, 36, aa), vmi_idx({2, 3}, -4, 4, 37, ia), vmi_idx({2, 3}, 0, 5, 38),
                                    vmi_f32({2, 3, 1, 1, 3}, 39, ua)},
                                   {aa, ia, -1, ua}, {}, 1e-5, 1e-5);
        }
      }
    }
  }
  // scatter (last write wins) with distinct index tuples, and with the second index array batched.
  auto put = [](const std::vector<array>& x) { return std::vector<array>{scatter(x[0], {x[1], x[2]}, x[3], {0, 1})}; };
  const array i0 = array({0, 1, 3, 2}, int32);
  const array j0 = astype(reshape(array({4, 2, 0, 1, 3, 3, 1, 0, 0, 2, 4, 4, 1, 2, 3, 4}), {4, 4}), int32);
  const array u = vmi_f32({4, 1, 1, 3}, 40, 0);
  expect_vmap_matches_loop(put, {vmi_f32(as, 41, 1), i0, j0, u}, {1, -1, 0, 0});
  expect_vmap_matches_loop(put, {vmi_f32(as, 41), i0, j0, vmi_f32({4, 1, 1, 3}, 42)}, {-1, -1, 0, -1});
  expect_vmap_matches_loop(put, {vmi_f32(as, 41, 3), i0, take(j0, 0, 0), u}, {3, -1, -1, 0});
  // A dynamic slice_update, its start batched.
  auto dsu = vmi_three([](const array& a, const array& v, const array& s) { return slice_update(a, v, s, {1}); });
  expect_vmap_matches_loop(dsu, {vmi_f32(as, 43, 0), vmi_f32({2, 3}, 44), vmi_idx({}, 0, 4, 45, 0)}, {0, -1, 0});
  expect_vmap_matches_loop(dsu, {vmi_f32(as, 43), vmi_f32({2, 3}, 44, 2), vmi_idx({}, 0, 4, 45)}, {-1, 2, -1});
}

TEST(IndexingVmap, MaskedScatter) {
  const Shape as{3, 4};
  auto f = vmi_three([](const array& a, const array& m, const array& s) { return masked_scatter(a, m, s); });
  for (int aa : {-1, 0, 2}) {
    for (int ma : {-1, 1}) {
      for (int sa : {-1, 0, 1}) {
        if (aa < 0 && ma < 0 && sa < 0) continue;
        const array mask = greater(vmi_f32(as, 46, ma), array(0.0f));
        expect_vmap_matches_loop(f, {vmi_f32(as, 47, aa), mask, vmi_f32({12}, 48, sa)}, {aa, ma, sa});
      }
    }
  }
  // A mask over the leading axis (rows of src), and nested vmap.
  auto rows = vmi_three([](const array& a, const array& m, const array& s) { return masked_scatter(a, m, s); });
  expect_vmap_matches_loop(rows, {vmi_f32(as, 49, 0), greater(vmi_f32({3}, 50, 0), array(0.0f)), vmi_f32({3, 4}, 51, 2)},
                           {0, 0, 2});
  const array a2 = astype(lcg_uniform({2, kVmiBatch, 3, 4}, -1, 1, 52), float32);
  const array m2 = greater(astype(lcg_uniform({kVmiBatch, 2, 3, 4}, -1, 1, 53), float32), array(0.0f));
  expect_vmap_matches_loop(vmap(f, {0, 0, -1}), {a2, m2, vmi_f32({12}, 54)}, {0, 1, -1});
  // vmap of grad (the vjp's running positions, batched) and grad of vmap (the batched node's vjp).
  auto gm = [](const std::vector<array>& v) {
    return grad([](const std::vector<array>& p) { return sum(square(masked_scatter(p[0], p[1], p[2]))); }, {0, 2})(v);
  };
  const array gmask = greater(vmi_f32(as, 57, 1), array(0.0f));
  expect_vmap_matches_loop(gm, {vmi_f32(as, 58, 0), gmask, vmi_f32({12}, 59, 0)}, {0, 1, 0});
  expect_vmap_matches_loop(gm, {vmi_f32(as, 58), gmask, vmi_f32({12}, 59)}, {-1, 1, -1});
  const array ga = vmi_f32(as, 60, 0), gs = vmi_f32({12}, 61, 1);
  auto batched = [&](const std::vector<array>& v) {
    return sum(square(vmap(f, {0, 1, 1})({v[0], gmask, v[1]})[0]));
  };
  auto looped = [&](const std::vector<array>& v) {
    array t = array(0.0f);
    for (int b = 0; b < kVmiBatch; ++b) {
      t = add(t, sum(square(masked_scatter(take(v[0], b, 0), take(gmask, b, 1), take(v[1], b, 1)))));
    }
    return t;
  };
  auto g1 = grad(batched, {0, 1})({ga, gs}), g2 = grad(looped, {0, 1})({ga, gs});
  for (size_t k = 0; k < 2; ++k) EXPECT_TRUE(allclose(g1[k], g2[k], 1e-6, 1e-6).item<bool>()) << k;
  // Too few src elements in one entry still throws.
  EXPECT_THROW(vmap(f, {-1, 0, 0})({vmi_f32(as, 55), full({kVmiBatch, 3, 4}, array(true)), vmi_f32({5}, 56, 0)})[0].eval(),
               std::runtime_error);
}

TEST(IndexingVmap, AsStrided) {
  // Overlapping windows of 3 with step 2, and a transpose-like view with an offset.
  for (int at : {0, 1, 2}) {
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return as_strided(a, {3, 3}, {2, 1}, 1); }),
                             {vmi_f32({2, 4}, 57, at)}, {at});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return as_strided(a, {4, 2}, {1, 4}, 0); }),
                             {vmi_f32({2, 4}, 58, at)}, {at});
  }
  // Through a non-contiguous input.
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return as_strided(transpose(a), {2, 2}, {-1, 3}, 2); }),
                           {vmi_f32({3, 2}, 59, 1)}, {1});
}

TEST(IndexingVmap, GradThroughTakeGatherAndScatters) {
  // vmap of grad: per-entry gradients of a loss through take and gather.
  auto take_loss = [](const std::vector<array>& v) { return sum(square(take(v[0], v[1], 1))); };
  auto g_take = [take_loss](const std::vector<array>& v) { return grad(take_loss, 0)(v); };
  for (auto axes : std::vector<std::vector<int>>{{0, -1}, {-1, 0}, {2, 1}}) {
    expect_vmap_matches_loop(g_take, {vmi_f32({3, 5}, 60, axes[0]), vmi_idx({2, 2}, -5, 5, 61, axes[1])}, axes);
  }
  auto gather_loss = [](const std::vector<array>& v) {
    return sum(multiply(gather(v[0], {v[1]}, {1}, {3, 1}), v[2]));
  };
  auto g_gather = [gather_loss](const std::vector<array>& v) { return grad(gather_loss, {0, 2})(v); };
  expect_vmap_matches_loop(g_gather, {vmi_f32({3, 5}, 62, 1), vmi_idx({4}, 0, 5, 63, 0), vmi_f32({4, 3, 1}, 64)},
                           {1, 0, -1});
  expect_vmap_matches_loop(g_gather, {vmi_f32({3, 5}, 62), vmi_idx({4}, 0, 5, 63), vmi_f32({4, 3, 1}, 64, 3)},
                           {-1, -1, 3});
  // Gradients of scatter_max and put_along_axis (masks of the winning writes) under vmap.
  auto smax = [](const std::vector<array>& v) {
    return grad([](const std::vector<array>& p) { return sum(square(scatter_max(p[0], p[1], p[2], 0))); }, {0, 2})(v);
  };
  expect_vmap_matches_loop(smax, {vmi_f32({5, 2}, 65, 0), vmi_idx({3}, 0, 5, 66, 0), vmi_f32({3, 1, 2}, 67, 0)},
                           {0, 0, 0});
  // grad of vmap: the gradient of the summed per-entry losses, the array shared or batched.
  const array idx = vmi_idx({2}, 0, 5, 69, 0);
  for (int aa : {-1, 0}) {
    const array a = vmi_f32({3, 5}, 68, aa);
    auto batched = [aa](const std::vector<array>& v) {
      return sum(vmap(as_vector_fn([](const array& x, const array& i) { return square(take(x, i, 1)); }), {aa, 0})(v)[0]);
    };
    auto looped = [aa](const std::vector<array>& v) {
      array s = array(0.0f);
      for (int b = 0; b < kVmiBatch; ++b) {
        s = add(s, sum(square(take(aa < 0 ? v[0] : take(v[0], b, 0), take(v[1], b, 0), 1))));
      }
      return s;
    };
    array g1 = grad(batched, 0)({a, idx})[0], g2 = grad(looped, 0)({a, idx})[0];
    EXPECT_TRUE(allclose(g1, g2, 1e-5, 1e-6).item<bool>()) << aa;
  }
}

// ---- sorting ----

TEST(SortVmap, SortArgsortTopkArgpartitionOnEveryAxis) {
  const Shape xs{3, 4, 5};
  for (int at : {0, 1, 2, 3}) {
    for (int axis : {0, 1, -1}) {
      const array x = vmi_f32(xs, 70, at);
      expect_vmap_matches_loop(as_vector_fn([axis](const array& a) { return sort(a, axis); }), {x}, {at});
      expect_vmap_matches_loop(as_vector_fn([axis](const array& a) { return argsort(a, axis); }), {x}, {at});
      expect_vmap_matches_loop(as_vector_fn([axis](const array& a) { return topk(a, 2, axis); }), {x}, {at});
      expect_vmap_matches_loop(as_vector_fn([axis](const array& a) { return argpartition(a, 1, axis); }), {x}, {at});
      expect_vmap_matches_loop(as_vector_fn([axis](const array& a) { return partition(a, -1, axis); }), {x}, {at});
    }
  }
  // Integers with ties (stable order), NaNs last, and the flattened overloads.
  const array ints = vmi_idx({6}, -3, 3, 71, 1);
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return argsort(a, 0); }), {ints}, {1});
  const array nans = where(greater(vmi_f32({6}, 72, 0), array(1.0f)), array(NAN), vmi_f32({6}, 73, 0));
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return sort(a, 0); }), {nans}, {0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return argsort(a, 0); }), {nans}, {0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return sort(a); }), {vmi_f32({2, 3}, 74, 1)}, {1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return topk(a, 3); }), {vmi_f32({2, 3}, 75, 2)}, {2});
  // topk's gradient (through ArgTopK) under vmap.
  expect_vmap_matches_loop(
      as_vector_fn([](const array& a) { return grad([](const array& p) { return sum(square(topk(p, 2, 0))); })(a); }),
      {vmi_f32({5, 2}, 76, 1)}, {1});
  expect_vmap_matches_loop(
      as_vector_fn([](const array& a) { return grad([](const array& p) { return sum(square(sort(p, 1))); })(a); }),
      {vmi_f32({3, 5}, 77, 2)}, {2});
}

TEST(SortVmap, SearchSortedSequenceAndValuesEitherBatched) {
  const array seqs = sort(vmi_f32({6}, 78, 0), 1);  // one sorted row per entry
  const array seq = sort(vmi_f32({6}, 79), 0);
  const array vals = vmi_f32({2, 3}, 80, 1);
  for (const char* side : {"left", "right"}) {
    auto f = as_vector_fn([side](const array& s, const array& v) { return searchsorted(s, v, side); });
    expect_vmap_matches_loop(f, {seq, vals}, {-1, 1});
    expect_vmap_matches_loop(f, {seqs, vmi_f32({2, 3}, 80)}, {0, -1});
    expect_vmap_matches_loop(f, {seqs, vals}, {0, 1});
    expect_vmap_matches_loop(f, {transpose(seqs), vmi_f32({2, 3}, 81, 2)}, {1, 2});
    // Values that hit the sequence exactly, and a scalar value per entry.
    expect_vmap_matches_loop(f, {seqs, take(seqs, 2, 1)}, {0, 0});
    // Nested: a grid of sequences against a grid of values.
    const array grid = sort(astype(lcg_uniform({3, kVmiBatch, 5}, -1, 1, 82), float32), 2);
    const array gv = astype(lcg_uniform({kVmiBatch, 3, 2}, -1, 1, 83), float32);
    expect_vmap_matches_loop(vmap(f, {0, 0}), {grid, gv}, {1, 0});
    expect_vmap_matches_loop(vmap(f, {0, -1}), {grid, vmi_f32({2}, 84, 0)}, {1, 0});
  }
  // Integer sequences searched for float values (promoted).
  expect_vmap_matches_loop(as_vector_fn([](const array& s, const array& v) { return searchsorted(s, v); }),
                           {sort(vmi_idx({5}, -4, 4, 85, 0), 1), vmi_f32({3}, 86, 0)}, {0, 0});
}
