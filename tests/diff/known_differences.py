"""Where Loom deliberately differs from PyTorch, and what the tester does about it (tests/diff/README.md).

Every place in diff.py that computes the reference other than PyTorch's way names one of the keys of
DIFFERENCES through `deviation(key)`, so each deviation has one stated reason here. Bugs are never
listed here: a bug gets a regression case in regressions.jsonl and an entry in FINDINGS.md.
"""

DIFFERENCES = {
    # ---- dtypes ----
    "promotion": "Loom promotes as numpy within a kind (bool < uint8 < int32 < int64 < float16/bfloat16 < "
    "float32 < float64; float16 with bfloat16 is float32; an integer with a float is the float), and 0-d "
    "arrays take part like any other (PyTorch lets a 0-d tensor lose to a higher-dimensional one of the "
    "same kind). The reference computes the result dtype with Loom's rule (core/dtype.h).",
    "int_to_float": "Floating ops (divide, arctan2, exp, log, ..., mean, var, std, logsumexp, softmax) "
    "of integer or bool arrays compute in float32 (MLX); PyTorch rejects some, promotes others to its "
    "default dtype. The reference casts to float32 first.",
    "sum_dtype": "sum and prod of bool give int32, of uint8 uint32 (MLX: integers narrower than 32 bits "
    "accumulate in (u)int32), int32 stays int32 (wrapping on overflow); cumsum of bool/uint8 gives int32. "
    "PyTorch gives int64. The reference accumulates in Loom's dtype.",
    "cumprod_dtype": "cumprod keeps its input's dtype (MLX): bool is a running \"and\", uint8 and int32 "
    "wrap on overflow; PyTorch gives int64 for integers and bool. The reference multiplies in Loom's dtype.",
    "bool_arith": "add/multiply/maximum/minimum of two bools stay bool (logical or / and), numpy's rule; "
    "power of bools is a or not b (MLX's); negative, square, subtract, floor/ceil/round, floor_divide "
    "and remainder reject bool, as numpy does (PyTorch rejects some and accepts others).",
    "argmax_dtype": "argmax/argmin/argsort/argpartition return int32 (MLX's uint32 would not hold -1; "
    "PyTorch returns int64). The reference casts its indices.",
    # ---- semantics ----
    "int_div_by_zero": "Integer floor_divide and remainder by zero give 0 (numpy's result, without the "
    "warning); PyTorch raises. The reference is numpy.",
    "float_remainder": "remainder and floor_divide of floats follow numpy's divmod (fmod-based, so "
    "1 // 0.1 == 9); PyTorch's remainder is a - floor(a / b) * b. The reference is numpy in the same "
    "float type (float32 for bfloat16, which Loom computes in float32).",
    "topk_order": "topk returns the k largest values in ascending order (Loom's choice, MLX leaves it "
    "unspecified); PyTorch returns them descending. The reference is the last k of a sort.",
    "partition": "partition/argpartition leave the order within each side unspecified (numpy, MLX); the "
    "comparator checks the defining property against a full sort instead of the values.",
    "split_count": "split(a, n) requires n to divide the axis (numpy's split, MLX); PyTorch's "
    "torch.split takes chunk sizes. The reference uses numpy.split.",
    "clip_bounds_order": "clip(a, lo, hi) with lo > hi gives hi, as numpy (and torch.clamp).",
    "reduce_empty_identity": "max/min over an empty axis throw (no identity), as numpy; so do "
    "argmax/argmin. The reference (torch) throws too; both rejecting is agreement.",
    "median_empty": "median over an empty set of values throws (MLX); numpy returns NaN with a "
    "warning and PyTorch's quantile raises. The reference raises too; both rejecting is agreement.",
    "take_index_bounds": "Out-of-range indices throw std::out_of_range from eval (numpy raises IndexError); "
    "agreement when both reject.",
    "mean_of_empty": "mean/var of an empty reduction is NaN (numpy), with no warning.",
    "ddof_too_large": "var/std with ddof >= n give NaN (Loom multiplies by NaN) where numpy gives inf or "
    "NaN with a warning; the reference is NaN.",
    "matmul_float_only": "matmul needs floating-point operands (BLAS; MLX too); PyTorch multiplies "
    "integers. Both rejecting is agreement; the reference rejects integer matmul.",
    "cross_entropy_targets": "cross_entropy takes class indices of any integer dtype (MLX); PyTorch "
    "wants int64. The reference casts them.",
    "minmax_jvp_select": "The jvp of maximum/minimum is the tangent of the input the output came from "
    "(a select; b's at a tie, as MLX). PyTorch's forward formula adds mask * (t_a - t_b), so an "
    "infinite tangent of the input not chosen (sqrt at 0) turns the result into NaN. For chains with "
    "maximum/minimum the comparator accepts any value where the reference tangent is NaN.",
    "blas_zero_times_inf": "matmul and conv run on BLAS, which may skip a multiplication by zero, so "
    "0 * inf can give inf (or -inf) where IEEE arithmetic, and the reference, give NaN. Where the "
    "reference is NaN the comparator accepts an infinity for these ops.",
    "half_grad_intermediates": "vjps of float16/bfloat16 inputs are computed by ops in that dtype (as "
    "in MLX and PyTorch's own half autograd), so intermediates can overflow or underflow (a^2 + b^2 "
    "in arctan2's rule) where the float64 reference does not; gradient elements beyond FMAX / 64 of the "
    "dtype, and non-finite gradient elements where the reference is finite, are not compared.",
    "overflow_in_accumulation": "Sums and products (matmul, conv, sum, prod, var, avg_pool's window sums) "
    "overflow in an order-dependent way once the sum of magnitudes (for prod, the product of the "
    "magnitudes above 1) passes the dtype's largest finite value by more than a rounding, or for prod where "
    "the product of the magnitudes below 1 underflows and a factor above 1 or an infinity is there too: "
    "+inf, -inf, NaN (an infinite partial product times a zero, or an infinite factor times an underflowed "
    "partial product) and finite values are all results of some order of the operations, the reference's "
    "(PyTorch's float64 sum of +-DBL_MAX, DBL_MAX + DBL_MAX - inf = NaN in a mean) included, so any value "
    "agrees there.",
    "grad_intermediates_extreme": "vjps of float32/float64 inputs are computed in that dtype too (as in "
    "PyTorch), so where an input is beyond the square root of the largest finite value or below the square "
    "root of the smallest normal one, a derivative rule's squares overflow or underflow (arctan2's "
    "b / (a^2 + b^2) is NaN for b = FLT_MAX in PyTorch's float32 as in Loom's) where the float64 reference "
    "does not: for such cases the half_grad_intermediates rule applies.",
    "float_to_int_saturates": "Float to integer conversion (astype, and values written into an integer "
    "array: slice_update, put_along_axis, ...) truncates toward zero and saturates at the integer's limits, "
    "NaN giving 0 (core/dispatch.h: no conversion is undefined behaviour); numpy and PyTorch leave "
    "out-of-range values undefined (x86 gives the smallest integer, uint8 wraps: -1.7 -> 255). The "
    "reference converts as Loom does.",
    "std_at_zero": "std has no derivative where a group's values are all equal (the square root of a "
    "zero variance): PyTorch's torch.std gives 0 there, MLX and JAX (the square root's derivative, inf, "
    "times 0) NaN, as Loom does; where the spread is rounding noise the derivative is the ratio of two "
    "rounding residues. The derivatives of such cases are not compared.",
    "sign_nan": "sign(NaN) is NaN (numpy, MLX); PyTorch gives 0.",
    "half_compute": "Loom computes float16/bfloat16 elementwise ops in float32 and rounds once; the "
    "reference computes in float64 and rounds once. Tolerances (diff.py: RTOL) allow the double rounding.",
    "scatter_gather_window_bounds": "gather / scatter / scatter_add / ... check that every window (index plus "
    "window size) lies inside its axis and throw std::out_of_range from eval; MLX reads or writes outside the "
    "array. Agreement when both reject.",
    "scatter_bool_logical": "scatter_add / slice_update_add on bool is a logical or, scatter_prod a logical and "
    "(as MLX's bool arithmetic); the reference computes on integers and compares with 0.",
    "as_strided_bounds": "as_strided whose elements reach outside the array throws when built (MLX does not "
    "check, numpy's as_strided reads outside the buffer). Agreement when both reject.",
    "complex_divide_by_zero": "complex64 division of a nonzero value by zero gives an infinity (C99 Annex G, the "
    "std::complex division: its signs follow the sign of the zero, where numpy's (a.real / |0|, a.imag / |0|) ignores "
    "it); PyTorch's Smith division gives NaN. The reference is numpy's, and any infinity agrees with its infinities.",
    "complex_singular_values": "At the singular points of the complex functions (arctan(+-i), arctanh(+-1)) Loom "
    "gives C99's value (std::complex: catanh(1) = inf + 0j), PyTorch an infinite part beside a NaN one; the comparator "
    "accepts any value whose infinite part is the reference's.",
    "complex_log1p": "log1p of complex64 keeps its relative precision for |z| << 1 (Loom computes log|1 + z| as "
    "log1p(x (2 + x) + y^2) / 2 there), where numpy 1.24 computes log(1 + z) and rounds 1 + z; PyTorch has no "
    "complex log1p. The reference is an accurate log1p.",
}

_used = set()


def deviation(key):
    """Marks a deviation from PyTorch as taken; `key` must be listed above."""
    if key not in DIFFERENCES:
        raise KeyError("known_differences.py lists no deviation " + key)
    _used.add(key)
    return key


# Registry primitives the generator does not exercise (yet), each with the reason. The short run fails
# if a primitive of tests/registry.h is neither made by some case (loom_diff --primitives) nor here.
NOT_COVERED = {
    # linalg's factorizations the generator does not draw (the others are linalg_* ops).
    "Eig(values)": "eigenvalues come in LAPACK's order; checked against numpy and by A V = V diag(w) in "
                   "tests/ops/linalg_lapack_test.cpp",
    "Eig(vectors)": "eigenvectors are defined up to a complex phase; checked by A V = V diag(w)",
    "LUF": "LAPACK's getrf: checked by take_along_axis(L, rows) U == a in tests/ops/linalg_lapack_test.cpp",
    "RandomBits": "random samples: the Threefry stream (MLX's layout) has no PyTorch counterpart to compare values "
                  "with; tests/random checks it against MLX's known values",
    "RandomUniform": "random samples (see RandomBits)",
    "RandomNormal": "random samples (see RandomBits)",
    "RandomTruncatedNormal": "random samples (see RandomBits)",
    "RandomInt": "random samples (see RandomBits)",
    "RandomBernoulli": "random samples (see RandomBits)",
    "RandomGumbel": "random samples (see RandomBits)",
    "RandomLaplace": "random samples (see RandomBits)",
    "RandomCategorical": "random samples (see RandomBits)",
    "RandomPermutation": "random samples (see RandomBits)",
    "PermuteAxis": "random permutation of an array: values depend on the key (see RandomBits)",
    "PermuteAxisInverse": "the vjp of PermuteAxis (see RandomBits)",
    "CustomTransforms": "custom_function/checkpoint take user C++ callbacks; nothing to compare with PyTorch",
    "Depends": "graph ordering utility without values of its own",
    "CastOfValue": "the autocast policy's reuse of a parameter's cast in a later graph (no PyTorch op); checked "
                   "against AsType and central differences in tests/ops/autocast_test.cpp",
    "AdamUpdate": "an optimizer step; tested bit for bit against torch.optim in tests/fast/adam_update_test.cpp",
    "all_sum": "collectives need mpirun; with one process they record no node",
    "all_mean": "collectives (see all_sum)",
    "all_max": "collectives (see all_sum)",
    "all_min": "collectives (see all_sum)",
    "all_gather": "collectives (see all_sum)",
    "sum_scatter": "collectives (see all_sum)",
    "all_to_all": "collectives (see all_sum)",
    "broadcast": "collectives (see all_sum)",
    "barrier": "collectives (see all_sum)",
    "send": "collectives (see all_sum)",
    "recv": "collectives (see all_sum)",
    "send_recv": "collectives (see all_sum)",
    "agree": "collectives (see all_sum)",
    "NoDerivative": "a test's own primitive",
    "OwnBuffer": "a test's own primitive",
    "IgnoresDonor": "a test's own primitive",
    "Step": "a test's own primitive",
    "FakeComm": "a test's own primitive",
    "StreamTestGate": "a test's own primitive",
}

# Bugs being fixed on main, excluded from the short run until the fix lands (then delete the entry):
# name -> (the bug, a predicate on a case picking exactly the affected cases), e.g.
#     "prod_vjp_empty": ("vjp of prod over a 0-size axis throws",
#                        lambda c: c["op"] == "prod" and "vjp" in c and 0 in c["_inputs"][0].shape),
# The long run (scripts/diff.sh) ignores this list. (The bugs it held before landed on main: c64fc7a,
# 14241b0, 398048b, and the five complex64 bugs the complex family found first: NaN-part
# comparisons, sign and arccosh derivatives, log2/log10 of 0, masked_scatter. The last entry,
# complex_arccosh_cut_derivative, was the reference's: torch's z - 1 loses an imaginary -0.)
PENDING_FIXES = {}
