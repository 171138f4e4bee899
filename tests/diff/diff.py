#!/usr/bin/python3
"""Differential tester: random Loom cases checked against PyTorch / numpy (tests/diff/README.md).

    /usr/bin/python3 tests/diff/diff.py --runner build/tests/loom_diff --cases 20000 --seed 7
    /usr/bin/python3 tests/diff/diff.py --runner build/tests/loom_diff --seed 7 --replay 1234
    /usr/bin/python3 tests/diff/diff.py --runner build/tests/loom_diff --short     # + regressions, coverage

Cases go to loom_diff (a subprocess, in batches) as JSON lines; each result is compared with a
reference computed here. A crash or hang of the runner is pinned to its case and reported as a
"crash" disagreement; the rest of the batch runs on.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np
    import torch
except ImportError as e:  # CTest: SKIP_RETURN_CODE 77
    print("SKIP: the differential tester needs numpy and torch for /usr/bin/python3 "
          "(Debian: apt-get install python3-numpy python3-torch; scripts/setup.sh does): %s" % e)
    sys.exit(77)

from known_differences import DIFFERENCES, NOT_COVERED, PENDING_FIXES, deviation  # noqa: E402

torch.set_num_threads(1)
import warnings  # noqa: E402
warnings.filterwarnings("ignore", message="scatter_reduce")  # "in beta": the references use it
fwAD = torch.autograd.forward_ad

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]
DTYPES = ["bool"] + INTS + FLOATS
TORCH = {"bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
         "int64": torch.int64,
         "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
RANK = {d: i for i, d in enumerate(DTYPES)}
# Unit roundoff of each float type. Tolerances are multiples of it: an elementwise op computed in
# float32 and rounded once (float16/bfloat16), or by Loom's vectorized float32 math (a few ulp), must be
# within RTOL relative; accumulations (sums, products, matmul, norms) within RTOL of the sum of
# magnitudes (the op applied to |x|), the usual bound for floating-point summation up to its
# length factor, which blocked/pairwise summation keeps small.
UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24, "float64": 2.0 ** -53}
RTOL = {"float16": 4 * UNIT["float16"], "bfloat16": 4 * UNIT["bfloat16"], "float32": 128 * UNIT["float32"],
        "float64": 1024 * UNIT["float64"]}
TINY = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}
FMAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
        "float64": 1.7976931348623157e308}
ILIM = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-2 ** 15, 2 ** 15 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
        "int64": (-2 ** 63, 2 ** 63 - 1)}


def promote(a, b):
    deviation("promotion")
    if a == b:
        return a
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    if a in FLOATS and b not in FLOATS:
        return a
    if b in FLOATS and a not in FLOATS:
        return b
    if {a, b} == {"uint8", "int8"}:  # MLX's table: the signed type wide enough for both
        return "int16"
    return a if RANK[a] > RANK[b] else b


def floating(d):
    if d in FLOATS:
        return d
    deviation("int_to_float")
    return "float32"


# ---- values: numpy arrays of the exact values (float64 for float dtypes, rounded to the dtype) ----
def round_to(x, dt):
    """float64 numpy/torch values rounded to float dtype dt, as float64."""
    t = torch.as_tensor(np.asarray(x, dtype=np.float64))
    return t.to(TORCH[dt]).to(torch.float64).numpy()


def rt(t, dt):
    """A float64 tensor rounded to dt (a float dtype), still float64 and differentiable."""
    return t.to(TORCH[dt]).to(torch.float64) if dt != "float64" else t


class Gen:
    def __init__(self, seed):
        self.seed = seed
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)

    def values(self, dt, n, special=True, lo=None, hi=None, positive=False, extreme=True):
        r = self.r
        if dt == "bool":
            return self.np.integers(0, 2, n).astype(bool)
        if dt in INTS:
            a, b = ILIM[dt]
            small = self.np.integers(max(a, -20), min(b, 20) + 1, n)
            if lo is not None:
                small = self.np.integers(lo, hi + 1, n)
            if special and extreme and n and r.random() < 0.3:
                k = max(1, n // 8)
                idx = self.np.integers(0, n, k)
                small = small.astype(object) if dt == "int64" else small.astype(np.int64)
                for i in idx:
                    small[i] = r.choice([a, b, a + 1, b - 1, 0, -1 if a < 0 else 1])
            return np.array(small, dtype=np.int64 if dt != "int64" else np.int64)
        scale = r.choice([1.0, 1.0, 3.0, 0.1, 30.0]) if hi is None else 1.0
        if lo is not None:
            v = self.np.uniform(lo, hi, n)
        else:
            v = self.np.standard_normal(n) * scale
        if positive:
            v = np.abs(v) + 0.1
        if special and n and r.random() < 0.3:
            k = max(1, n // 8)
            specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5]
            if extreme:  # off for ops that square their inputs in the input's dtype (norms, attention)
                specials += [TINY[dt] / 4, -TINY[dt] / 2, FMAX[dt], -FMAX[dt]]
            for i in self.np.integers(0, n, k):
                v[i] = r.choice(specials)
        return round_to(v, dt)

    def dim(self, allow_zero=True):
        r = self.r.random()
        if allow_zero and r < 0.04:
            return 0
        if r < 0.25:
            return 1
        return self.r.choice([2, 3, 4, 5, 7])

    def shape(self, max_rank=6, allow_zero=True, min_rank=0):
        rank = self.r.choice([0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6])
        rank = max(min_rank, min(rank, max_rank))
        s = [self.dim(allow_zero) for _ in range(rank)]
        while np.prod(s, dtype=np.int64) > 2000:
            s[self.r.randrange(rank)] = 1
        return s

    def large_shape(self):
        n = self.r.choice([33000, 40000, 70000, 100000])
        rank = self.r.choice([1, 2, 3])
        if rank == 1:
            return [n]
        if rank == 2:
            a = self.r.choice([3, 64, 257])
            return [a, n // a]
        return [self.r.choice([2, 5]), self.r.choice([7, 64]), n // 128]

    def broadcastable(self, shape):
        """A shape that broadcasts to `shape`."""
        s = list(shape)
        while s and self.r.random() < 0.3:
            s.pop(0)
        return [1 if (d != 0 or self.r.random() < 0.5) and self.r.random() < 0.3 else d for d in s]

    def view(self, shape):
        """(base shape, recipe) whose view has `shape`; None for a plain array."""
        r = self.r.random()
        if r < 0.6 or not shape:
            return list(shape), None
        if r < 0.75:
            perm = list(range(len(shape)))
            self.r.shuffle(perm)
            inv = [perm.index(i) for i in range(len(shape))]
            base = [shape[p] for p in inv]  # transpose(base, perm) has shape[i] = base[perm[i]]
            base = [0] * len(shape)
            for i, p in enumerate(perm):
                base[p] = shape[i]
            return base, [{"transpose": perm}]
        if r < 0.9:
            base, start, stop, strides = [], [], [], []
            for n in shape:
                s = self.r.choice([1, 1, 2, 3, -1, -2])
                extra = self.r.choice([0, 0, 1, 2])
                length = max(n * abs(s) - (abs(s) - 1), 0) + extra if n else extra
                first = self.r.randint(0, extra) if n else self.r.randint(0, max(extra, 0))
                if s > 0:
                    b, e = first, first + (n - 1) * s + 1 if n else first
                else:
                    b = length - 1 - first
                    if not n and b < 0:
                        b = 0  # -1 would be numpy's last element, and the slice (-1, -length-1) not empty
                    e = b + (n - 1) * s - 1 if n else b
                    if e < 0:
                        e = -length - 1  # before the first element (numpy's rule for negative stops)
                base.append(length)
                start.append(b)
                stop.append(e)
                strides.append(s)
            return base, [{"slice": {"start": start, "stop": stop, "strides": strides}}]
        b = self.broadcastable(shape)
        return b, [{"broadcast": list(shape)}]


def view_index(base_shape, recipe):
    """The flat indices into the base that a view recipe picks, as numpy (negative steps included)."""
    idx = np.arange(int(np.prod(base_shape, dtype=np.int64)), dtype=np.int64).reshape(base_shape)
    for step in recipe or []:
        if "transpose" in step:
            idx = np.transpose(idx, step["transpose"])
        elif "slice" in step:
            s = step["slice"]
            idx = idx[tuple(slice(a, b, c) for a, b, c in zip(s["start"], s["stop"], s["strides"]))]
        elif "broadcast" in step:
            idx = np.broadcast_to(idx, step["broadcast"])
        elif "reshape" in step:
            idx = idx.reshape(step["reshape"])
    return idx


# ---- JSON encoding ----
def enc_values(v, dt):
    if dt == "complex64":  # [real, imag] pairs
        z = np.asarray(v, dtype=np.complex128).reshape(-1)
        return [list(p) for p in zip(enc_values(z.real, "float32"), enc_values(z.imag, "float32"))]
    if dt == "bool":
        return [bool(x) for x in np.asarray(v).reshape(-1)]
    if dt in INTS or dt in UNSIGNED:
        return [int(x) for x in np.asarray(v).reshape(-1)]
    out = []
    for x in np.asarray(v, dtype=np.float64).reshape(-1):
        x = float(x)
        out.append("nan" if x != x else "inf" if x == math.inf else "-inf" if x == -math.inf else x)
    return out


def dec_values(data, dt):
    if dt == "complex64":
        z = np.empty(len(data), dtype=np.complex128)
        z.real = [float(x[0]) for x in data]
        z.imag = [float(x[1]) for x in data]
        return z
    if dt in INTS or dt in ("bool", "uint16", "uint32", "uint64"):
        return np.array([int(x) for x in data], dtype=object if dt in ("int64", "uint64") else np.int64)
    return np.array([float(x) if not isinstance(x, str) else float(x) for x in data], dtype=np.float64)


class Input:
    def __init__(self, dt, shape, values, recipe=None, base_shape=None):
        self.dt, self.shape, self.values, self.recipe = dt, list(shape), values, recipe
        self.base_shape = list(base_shape if base_shape is not None else shape)

    def to_json(self):
        j = {"dtype": self.dt, "shape": self.base_shape, "data": enc_values(self.values, self.dt)}
        if self.recipe:
            j["view"] = self.recipe
        return j

    @staticmethod
    def from_json(j):
        dt = j["dtype"]
        vals = dec_values(j["data"], dt)
        return Input(dt, j["shape"], vals, j.get("view"), j["shape"])


# ---- the ops: generator, reference and tolerance model per op ----
# A reference gets torch tensors for the (viewed) inputs: float dtypes as float64 holding the exact
# values, integers and bools in their own dtype; `dts` are their Loom dtypes. It returns a list of
# (tensor, Loom dtype) outputs; float outputs are rounded to their dtype by the comparator's caller.
OPS = {}


class Op:
    def __init__(self, name, gen, ref, grad=True, scale=None, prims=(), rtol=1.0, grad_rtol=16.0, bound=None,
                 jvp=None):
        self.name, self.gen, self.ref, self.grad = name, gen, ref, grad
        self.scale = scale  # (tensors, dts, params) -> a tensor of magnitudes per output, or None
        # (tensors, dts, params) -> the largest magnitude an intermediate result (a partial sum or
        # product) can reach per output, for the overflow rule of compare(); None: the scale's.
        self.bound = bound
        self.jvp = grad if jvp is None else jvp  # forward-mode derivatives are compared too
        self.rtol, self.grad_rtol = rtol, grad_rtol  # multiples of RTOL[dtype]
        OPS[name] = self


def float_to_int(t, dst):
    """Float values (float64) converted to integer dtype dst as Loom does (core/dispatch.h): toward
    zero, saturating at the dtype's limits, NaN to 0. numpy and PyTorch leave out-of-range values
    undefined (x86 gives the smallest integer; uint8 wraps)."""
    deviation("float_to_int_saturates")
    if dst == "bool":
        return t != 0
    lo, hi = ILIM[dst]
    t = torch.nan_to_num(t.detach().to(torch.float64).trunc(), nan=0.0, posinf=math.inf, neginf=-math.inf)
    big, small = t >= float(hi), t <= float(lo)
    mid = torch.where(big | small, torch.zeros_like(t), t).to(torch.int64)
    out = torch.where(big, torch.full_like(mid, hi), torch.where(small, torch.full_like(mid, lo), mid))
    return out.to(TORCH[dst])


def cast(t, src, dst):
    """Tensor t of Loom dtype src cast to dst (float dtypes as float64 holding dst's values)."""
    if dst in FLOATS:
        if src in FLOATS:
            return rt(t, dst)
        return rt(t.to(torch.float64), dst) if src != "int64" else rt(t.to(torch.float64), dst)
    if src in FLOATS:
        return float_to_int(t, dst)
    return t.to(TORCH[dst])


def pick_dtype(g, allowed=DTYPES):
    return g.r.choice(list(allowed))


# Elementwise unary ops.
def _np_log1p(t):
    with np.errstate(all="ignore"):
        return torch.from_numpy(np.asarray(np.log1p(t.numpy()), dtype=np.float64))


def _log1p(t):
    """log1p, differentiable, right up to the largest float64 (torch.log1p(1.79e308) is inf: its
    float64 kernel overflows); above 2^53 log1p(x) is log(x) to float64's precision."""
    if not t.requires_grad and not (fwAD.unpack_dual(t).tangent is not None):
        return _np_log1p(t)
    big = t > 2.0 ** 53
    return torch.where(big, torch.log(torch.where(big, t, torch.ones_like(t))), torch.log1p(torch.where(big, torch.zeros_like(t), t)))


UNARY_FLOAT = {
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "exp": torch.exp,
    # torch.log1p(1.79e308) is inf (its float64 kernel overflows); numpy's is 709.78.
    "expm1": torch.expm1, "log": torch.log, "log1p": _log1p, "log2": torch.log2, "log10": torch.log10,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "erfinv": torch.erfinv,
    "arcsin": torch.asin, "arccos": torch.acos, "arctan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh,
    "arcsinh": torch.asinh, "arccosh": torch.acosh, "arctanh": torch.atanh,
}
UNARY_NUMERIC = {"negative": torch.neg, "square": torch.square, "floor": torch.floor, "ceil": torch.ceil,
                 "round": torch.round}
UNARY_ANY = {"abs": torch.abs, "sign": lambda t: torch.where(torch.isnan(t), t, torch.sign(t)) if t.is_floating_point() and deviation("sign_nan") else torch.sign(t), "copy": lambda t: t.clone(), "contiguous": lambda t: t.contiguous(), "stop_gradient": lambda t: t.detach()}
PREDICATES = {"logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf,
              "isfinite": torch.isfinite}


def gen_unary(name):
    def gen(g, big):
        dt = pick_dtype(g)
        shape = g.large_shape() if big else g.shape()
        lo = hi = None
        if name == "erfinv":
            lo, hi = -1.0, 1.0
        return [make_input(g, dt, shape, lo=lo, hi=hi)], {}
    return gen


def make_input(g, dt, shape, special=True, lo=None, hi=None, positive=False, view=True, extreme=True):
    base, recipe = g.view(shape) if view else (list(shape), None)
    n = int(np.prod(base, dtype=np.int64))
    return Input(dt, shape, g.values(dt, n, special, lo, hi, positive, extreme), recipe, base)


def unary_ref(name, fn, kind):
    def ref(ts, dts, p):
        t, dt = ts[0], dts[0]
        if kind == "float":
            d = floating(dt)
            return [(fn(cast(t, dt, d)), d)]
        if kind == "pred":
            return [(fn(t), "bool")]
        if kind == "numeric":
            if dt == "bool":
                deviation("bool_arith")
                raise ValueError("bool")
            if name in ("floor", "ceil", "round") and dt not in FLOATS:
                return [(t.clone(), dt)]
            return [(fn(t), dt)]
        # any
        if dt == "bool":
            return [(t.clone(), dt)] if name != "stop_gradient" else [(t, dt)]
        if name == "abs" and dt == "uint8":
            return [(t.clone(), dt)]
        return [(fn(t), dt)]
    return ref


def scale_erfinv(ts, dts, p):
    # erfinv is ill-conditioned near +-1: rounding its input by one unit moves the result by
    # |x| erfinv'(x) = |x| sqrt(pi) / 2 exp(erfinv(x)^2) units (8000 at 1 - 6e-6), whichever way the
    # function is evaluated (torch's float64 erfinv is 4e-13 off there, Loom's 2e-13).
    x = cast(ts[0], dts[0], floating(dts[0]))
    y = torch.erfinv(x)
    c = x.abs() * math.sqrt(math.pi) / 2 * torch.exp(y * y)
    return torch.where(torch.isfinite(c), c, torch.zeros_like(c))


def scale_conditioning(fprime):
    """|x f'(x)|: how far rounding the input by one unit moves the result, in units of it: large near
    the edges of arcsin's, arccos's, arctanh's and arccosh's domains and for sinh / cosh of large x,
    whichever way the function is evaluated."""
    def scale(ts, dts, p):
        x = cast(ts[0], dts[0], floating(dts[0]))
        c = (x.abs() * fprime(x)).abs()
        return torch.where(torch.isfinite(c), c, torch.zeros_like(c))
    return scale


UNARY_SCALES = {
    "erfinv": scale_erfinv,
    "arcsin": scale_conditioning(lambda x: torch.rsqrt(1 - x * x)),
    "arccos": scale_conditioning(lambda x: torch.rsqrt(1 - x * x)),
    "arctanh": scale_conditioning(lambda x: 1 / (1 - x * x)),
    "arccosh": scale_conditioning(lambda x: torch.rsqrt(x * x - 1)),
    "sinh": scale_conditioning(torch.cosh),
    "cosh": scale_conditioning(torch.sinh),
}
for _n, _f in UNARY_FLOAT.items():
    Op(_n, gen_unary(_n), unary_ref(_n, _f, "float"), scale=UNARY_SCALES.get(_n))
for _n, _f in UNARY_NUMERIC.items():
    Op(_n, gen_unary(_n), unary_ref(_n, _f, "numeric"))
for _n, _f in UNARY_ANY.items():
    Op(_n, gen_unary(_n), unary_ref(_n, _f, "any"), grad=_n != "stop_gradient")
for _n, _f in PREDICATES.items():
    Op(_n, gen_unary(_n), unary_ref(_n, _f, "pred"), grad=False)


# Elementwise binary ops.
def np_binary(fn):
    """numpy in the compute dtype (float32 for bfloat16 / float16, which Loom computes in float32)."""
    def run(a, b, d):
        if d in FLOATS:
            npd = np.float64 if d == "float64" else np.float32
            with np.errstate(all="ignore"):
                r = fn(a.detach().numpy().astype(npd), b.detach().numpy().astype(npd))
            return torch.from_numpy(np.asarray(r, dtype=np.float64))
        with np.errstate(all="ignore"):
            r = fn(a.numpy(), b.numpy())
        return torch.from_numpy(np.asarray(r)).to(TORCH[d])
    return run


def _int_floor_divide(a, b):
    return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b)))


def _int_remainder(a, b):
    return np.where(b == 0, 0, np.remainder(a, np.where(b == 0, 1, b)))


def _maximum(a, b):
    """torch.maximum with MLX's (and Loom's) derivative: all of it to the input the value came from,
    a where a > b or a is NaN, else b (b at a tie; torch.maximum splits a tie in halves)."""
    return torch.where((a > b) | torch.isnan(a), a, b)


def _minimum(a, b):
    return torch.where((a < b) | torch.isnan(a), a, b)


def _logaddexp(a, b):
    """log(e^a + e^b) as max + log1p(exp(-|a - b|)), differentiable: torch.logaddexp rounds results
    below ~1e-16 to 0 (logaddexp(0, -41) is 0.0 there; numpy and the exact value: 1.56e-18)."""
    m = torch.maximum(a, b)
    same_inf = torch.isinf(m) & (a == b)  # equal infinities: a - b would be NaN
    d = torch.where(same_inf, torch.zeros_like(a), -(a - b).abs())
    return m + torch.log1p(torch.exp(d))


BINARY = {
    # name: (kind, torch fn or None for numpy, numpy fn)
    "add": ("any", torch.add), "subtract": ("numeric", torch.sub), "multiply": ("any", torch.mul),
    "divide": ("float", torch.div), "power": ("any", torch.pow), "maximum": ("any", _maximum),
    "minimum": ("any", _minimum), "arctan2": ("float", torch.atan2), "logaddexp": ("float", _logaddexp),
    "floor_divide": ("numeric", None), "remainder": ("numeric", None),
    "equal": ("pred", torch.eq), "not_equal": ("pred", torch.ne), "less": ("pred", torch.lt),
    "less_equal": ("pred", torch.le), "greater": ("pred", torch.gt), "greater_equal": ("pred", torch.ge),
    "logical_and": ("logical", torch.logical_and), "logical_or": ("logical", torch.logical_or),
}


def gen_binary(name):
    def gen(g, big):
        shape = g.large_shape() if big else g.shape()
        da = pick_dtype(g)
        db = da if g.r.random() < 0.6 else pick_dtype(g)
        sa, sb = shape, g.broadcastable(shape)
        if g.r.random() < 0.5:
            sa, sb = sb, sa
        lo = hi = None
        if name == "power" and (da in INTS or db in INTS) and not (da in FLOATS or db in FLOATS):
            lo, hi = -3, 6  # integer powers: small exponents keep the reference exact
        return [make_input(g, da, sa), make_input(g, db, sb, lo=lo, hi=hi)], {}
    return gen


def binary_ref(name, kind, fn):
    def ref(ts, dts, p):
        a, b = ts
        d = promote(dts[0], dts[1])
        if kind == "float":
            d = floating(d)
        if kind in ("numeric",) and d == "bool":
            deviation("bool_arith")
            raise ValueError("bool")
        if kind == "logical":  # on truth values: PyTorch casts a 0-d int32 to uint8 first (INT32_MIN -> 0)
            deviation("promotion")
            return [(fn(a if dts[0] == "bool" else a != 0, b if dts[1] == "bool" else b != 0), "bool")]
        ca, cb = cast(a, dts[0], d), cast(b, dts[1], d)
        if kind == "pred":
            return [(fn(ca, cb), "bool")]
        if name in ("floor_divide", "remainder"):
            deviation("int_div_by_zero" if d not in FLOATS else "float_remainder")
            npfn = (_int_floor_divide if name == "floor_divide" else _int_remainder) if d not in FLOATS else (
                np.floor_divide if name == "floor_divide" else np.remainder)
            return [(np_binary(npfn)(ca, cb, d), d)]
        if d == "bool":
            if name == "power":  # MLX's bool power: x ** 0 is 1 and 0 ** 1 is 0, so a or not b
                return [(torch.logical_or(ca, torch.logical_not(cb)), d)]
            return [(torch.logical_or(ca, cb) if name in ("add", "maximum") else torch.logical_and(ca, cb), d)]
        if name == "power" and d in INTS:
            return [(np_binary(_int_power)(ca, cb, d), d)]
        return [(fn(ca, cb), d)]
    return ref


def _int_power(a, b):
    out = np.ones(np.broadcast(a, b).shape, dtype=a.dtype)
    a, b = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
    neg = b < 0
    with np.errstate(all="ignore"):
        pos = np.power(a, np.where(neg, 0, b))
    negval = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 1, -1, 1), 0)).astype(a.dtype)
    return np.where(neg, negval, pos)


def scale_logaddexp(ts, dts, p):
    """|a| sigmoid(a - b) + |b| sigmoid(b - a): how far rounding the inputs moves log(e^a + e^b) (more
    than |result| when the result is near 0)."""
    d = floating(promote(dts[0], dts[1]))
    a, b = cast(ts[0], dts[0], d).to(torch.float64), cast(ts[1], dts[1], d).to(torch.float64)
    c = a.abs() * torch.sigmoid(a - b) + b.abs() * torch.sigmoid(b - a)
    return torch.where(torch.isfinite(c), c, torch.zeros_like(c))


for _n, (_k, _f) in BINARY.items():
    Op(_n, gen_binary(_n), binary_ref(_n, _k, _f), grad=_k in ("any", "numeric", "float"),
       scale=scale_logaddexp if _n == "logaddexp" else None)


# ---- bitwise ops: bool and integer dtypes; shift counts beyond the width give numpy's answers ----
BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
           "left_shift": np.left_shift, "right_shift": np.right_shift}


def gen_bitwise(name):
    def gen(g, big):
        shape = g.large_shape() if big else g.shape()
        kinds = INTS if "shift" in name else ["bool"] + INTS
        da = g.r.choice(kinds)
        db = da if g.r.random() < 0.6 else g.r.choice(kinds)
        sa, sb = shape, g.broadcastable(shape)
        if g.r.random() < 0.5:
            sa, sb = sb, sa
        lo, hi = (-2, 70) if "shift" in name else (None, None)  # counts past every width, and negative ones
        if "shift" in name and db == "uint8":
            lo = 0
        return [make_input(g, da, sa), make_input(g, db, sb, lo=lo, hi=hi)], {}
    return gen


def bitwise_ref(name, fn):
    def ref(ts, dts, p):
        d = promote(dts[0], dts[1])
        ca, cb = cast(ts[0], dts[0], d), cast(ts[1], dts[1], d)
        if d == "bool":
            return [(torch.from_numpy(np.asarray(fn(ca.numpy(), cb.numpy()))), d)]
        return [(np_binary(fn)(ca, cb, d), d)]
    return ref


for _n, _f in BITWISE.items():
    Op(_n, gen_bitwise(_n), bitwise_ref(_n, _f), grad=False)


def gen_bitwise_invert(g, big):
    shape = g.large_shape() if big else g.shape()
    return [make_input(g, g.r.choice(["bool"] + INTS), shape)], {}


def ref_bitwise_invert(ts, dts, p):
    t, dt = ts[0], dts[0]
    return [(torch.logical_not(t) if dt == "bool" else torch.bitwise_not(t), dt)]


Op("bitwise_invert", gen_bitwise_invert, ref_bitwise_invert, grad=False)


def gen_where(g, big):
    shape = g.large_shape() if big else g.shape()
    shapes = [shape, g.broadcastable(shape), g.broadcastable(shape)]
    g.r.shuffle(shapes)
    dc = g.r.choice(["bool", "bool", pick_dtype(g)])
    dx = pick_dtype(g)
    dy = dx if g.r.random() < 0.6 else pick_dtype(g)
    return [make_input(g, dc, shapes[0]), make_input(g, dx, shapes[1]), make_input(g, dy, shapes[2])], {}


def ref_where(ts, dts, p):
    d = promote(dts[1], dts[2])
    c = ts[0] != 0 if dts[0] != "bool" else ts[0]
    return [(torch.where(c, cast(ts[1], dts[1], d), cast(ts[2], dts[2], d)), d)]


Op("where", gen_where, ref_where)


def gen_clip(g, big):
    shape = g.large_shape() if big else g.shape()
    dt = g.r.choice(INTS + FLOATS)
    lo, hi = g.r.random() < 0.8, g.r.random() < 0.8
    if not lo and not hi:
        lo = True
    ins = [make_input(g, dt, shape)]
    for present in (lo, hi):
        if present:
            ins.append(make_input(g, dt if g.r.random() < 0.8 else g.r.choice(INTS + FLOATS), g.broadcastable(shape),
                                  special=g.r.random() < 0.2))
    return ins, {"lo": lo, "hi": hi}


def ref_clip(ts, dts, p):
    out, d = ts[0], dts[0]
    i = 1
    if p["lo"]:
        d2 = promote(d, dts[i])
        lo = cast(ts[i], dts[i], d2)
        o = cast(out, d, d2)
        out, d = torch.where((o < lo) | torch.isnan(lo) if d2 in FLOATS else o < lo, lo, o), d2  # NaN bound: NaN
        i += 1
    if p["hi"]:
        d2 = promote(d, dts[i])
        hi = cast(ts[i], dts[i], d2)
        o = cast(out, d, d2)
        out, d = torch.where((o > hi) | torch.isnan(hi) if d2 in FLOATS else o > hi, hi, o), d2
    return [(out, d)]


Op("clip", gen_clip, ref_clip)


def gen_astype(g, big):
    dt = pick_dtype(g)
    to = pick_dtype(g)
    shape = g.large_shape() if big else g.shape()
    # Float to integer conversion of out-of-range values is undefined (C++) and differs from numpy /
    # torch on every platform; keep float values in range of the target.
    inp = make_input(g, dt, shape, special=to in FLOATS or dt not in FLOATS,
                     lo=-100.0 if dt in FLOATS and to not in FLOATS else None,
                     hi=100.0 if dt in FLOATS and to not in FLOATS else None)
    if dt in FLOATS and to == "uint8":
        inp.values = np.abs(inp.values)
    return [inp], {"dtype": to}


def ref_astype(ts, dts, p):
    to = p["dtype"]
    t, dt = ts[0], dts[0]
    if dt in FLOATS and to in INTS:
        return [(float_to_int(t, to), to)]
    if to == "bool":
        return [(t != 0, to)]
    return [(cast(t, dt, to), to)]


Op("astype", gen_astype, ref_astype)


def gen_full(g, big):
    shape = g.large_shape() if big else g.shape()
    dt = pick_dtype(g)
    return [make_input(g, dt, g.broadcastable(shape))], {"shape": shape}


Op("full", gen_full, lambda ts, dts, p: [(ts[0].expand(p["shape"]).clone(), dts[0])])


def gen_arange(g, big):
    dt = g.r.choice(["int32", "int64", "float32", "float64"])
    start = g.r.randint(-10, 10)
    step = g.r.choice([1, 2, 3, -1, -2, 0.5, 0.25]) if dt in FLOATS else g.r.choice([1, 2, 3, -1, -2])
    stop = start + step * g.r.randint(-2, 30) + (0.5 if g.r.random() < 0.3 else 0)
    return [], {"start": float(start), "stop": float(stop), "step": float(step), "dtype": dt}


def ref_arange(ts, dts, p):
    n = max(0, math.ceil((p["stop"] - p["start"]) / p["step"]))
    v = p["start"] + p["step"] * torch.arange(n, dtype=torch.float64)
    return [(v if p["dtype"] in FLOATS else v.to(TORCH[p["dtype"]]), p["dtype"])]


Op("arange", gen_arange, ref_arange, grad=False)


# Reductions.
def gen_axes(g, ndim, allow_none=True):
    if allow_none and (ndim == 0 or g.r.random() < 0.2):
        return None
    k = g.r.randint(0, ndim) if ndim else 0
    axes = g.r.sample(range(ndim), k)
    return [a - ndim if g.r.random() < 0.3 else a for a in axes]


def gen_reduce(name):
    def gen(g, big):
        if name in ("all", "any"):
            dt = pick_dtype(g)
        elif name in ("mean", "var", "std", "logsumexp"):
            dt = g.r.choice(FLOATS + FLOATS + INTS + ["bool"])
        else:
            dt = pick_dtype(g)
        shape = g.large_shape() if big else g.shape()
        lo = hi = None
        if name == "prod" and dt in FLOATS:
            lo, hi = -2.0, 2.0
        inp = make_input(g, dt, shape, lo=lo, hi=hi, special=g.r.random() < 0.5,
                         extreme=name not in ("var", "std"))  # squares overflow in the dtype
        p = {"axes": gen_axes(g, len(shape)), "keepdims": g.r.random() < 0.3}
        if name in ("var", "std"):
            p["ddof"] = g.r.choice([0, 0, 1, 2])
        return [inp], p
    return gen


def norm_axes(axes, ndim):
    return list(range(ndim)) if axes is None else sorted(a % ndim for a in axes) if ndim else []


def reduce_ref(name):
    def ref(ts, dts, p):
        t, dt = ts[0], dts[0]
        axes = norm_axes(p["axes"], t.dim())
        keep = p.get("keepdims", False)
        if name in ("max", "min"):
            if any(t.shape[a] == 0 for a in axes):
                deviation("reduce_empty_identity")
                raise ValueError("empty")
            if not axes:
                return [(t.clone(), dt)]
            f = torch.amax if name == "max" else torch.amin
            if dt == "bool":
                r = f(t.to(torch.uint8), dim=axes, keepdim=keep).to(torch.bool)
            else:
                r = f(t, dim=axes, keepdim=keep)
            return [(r, dt)]
        if name in ("all", "any"):
            b = t != 0 if dt != "bool" else t
            r = b
            for a in sorted(axes, reverse=True):
                r = (torch.all if name == "all" else torch.any)(r, dim=a, keepdim=keep) if keep else \
                    (torch.all if name == "all" else torch.any)(r, dim=a)
            return [(r, "bool")]
        if name in ("sum", "prod"):
            od = dt
            if dt in ("bool", "uint8", "int8", "int16"):
                deviation("sum_dtype")
                od = "uint32" if dt == "uint8" else "int32"
            # uint32 (no torch dtype): accumulate in int64, then wrap to 32 bits.
            cd = "int64" if od == "uint32" else od
            x = cast(t, dt, cd) if cd not in FLOATS else t
            if not axes:
                r = x.clone()
            elif name == "sum":
                r = torch.sum(x, dim=axes, keepdim=keep, dtype=TORCH[cd] if cd not in FLOATS else None)
            else:
                r = x
                for a in sorted(axes, reverse=True):
                    r = torch.prod(r, dim=a, keepdim=keep, dtype=TORCH[cd] if cd not in FLOATS else None)
            if od == "uint32":
                r = torch.bitwise_and(r, 0xFFFFFFFF)
            return [(r, od)]
        d = floating(dt)
        x = cast(t, dt, d)
        n = 1
        for a in axes:
            n *= t.shape[a]
        if name == "mean":
            if not axes:
                return [(x.clone(), d)]
            deviation("mean_of_empty")
            return [(torch.sum(x, dim=axes, keepdim=keep) / n if n else torch.sum(x, dim=axes, keepdim=keep) * math.nan, d)]
        if name in ("var", "std"):
            ddof = p.get("ddof", 0)
            if not axes:
                m = x
            else:
                m = torch.sum(x, dim=axes, keepdim=True) / n if n else x * math.nan
            s = torch.sum(torch.square(x - m), dim=axes, keepdim=keep) if axes else torch.square(x - m)
            if n - ddof <= 0:
                deviation("ddof_too_large")
                v = s * math.nan
            else:
                v = s / (n - ddof)
            return [(torch.sqrt(v) if name == "std" else v, d)]
        if name == "logsumexp":
            if not axes:
                return [(x.clone(), d)]
            return [(torch.logsumexp(x, dim=axes, keepdim=keep), d)]
        raise AssertionError(name)
    return ref


def reduce_scale(name):
    # Rounding error bound of a sum: RTOL times the sum of magnitudes (and for var/std the magnitudes
    # of the squares; for prod the product of magnitudes).
    def scale(ts, dts, p):
        t, dt = ts[0], dts[0]
        if dt not in FLOATS and name not in ("mean", "var", "std", "logsumexp"):
            return None
        x = cast(t, dt, floating(dt)).abs()
        x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
        axes = norm_axes(p["axes"], t.dim())
        keep = p.get("keepdims", False)
        if not axes:
            return x
        if name == "sum":
            return torch.sum(x, dim=axes, keepdim=keep)
        if name in ("mean",):
            return torch.amax(x, dim=axes, keepdim=keep) if x.numel() and all(x.shape[a] for a in axes) else None
        if name in ("var", "std"):
            if x.numel() == 0 or not all(x.shape[a] for a in axes):
                return None
            m = torch.amax(x, dim=axes, keepdim=keep)
            return m * m if name == "var" else m
        if name == "prod":
            r = x
            for a in sorted(axes, reverse=True):
                r = torch.prod(r, dim=a, keepdim=keep)
            return r
        if name == "logsumexp":  # log of a sum >= 1 after the shift: absolute error ~ RTOL
            xs = cast(t, dt, floating(dt))
            xs = torch.where(torch.isfinite(xs), xs, torch.zeros_like(xs))
            return torch.amax(xs.abs(), dim=axes, keepdim=keep) + 1 if all(x.shape[a] for a in axes) else None
        return None
    return scale


def bound_prod(ts, dts, p):
    # The largest partial product: the product of the magnitudes above 1. Past the largest finite
    # value some order of multiplication overflows, and an infinity times a zero factor is NaN
    # (numpy's float32 prod gives -0.0 where PyTorch's gives NaN).
    # Where the product of the magnitudes below 1 underflows (to 0 in some order), a factor above 1 or
    # an infinity makes any result possible too (0 * inf is NaN where the reference's order gave inf).
    t, dt = ts[0], dts[0]
    if dt not in FLOATS:
        return None
    a = t.abs()
    keep = p.get("keepdims", False)
    axes = sorted(norm_axes(p["axes"], t.dim()), reverse=True)

    def over(f, x):
        for ax in axes:
            x = f(x, dim=ax, keepdim=keep)
        return x
    large = over(torch.prod, torch.where(torch.isfinite(a) & (a > 1), a, torch.ones_like(a)))
    small = over(torch.prod, torch.where(torch.isfinite(a) & (a > 0) & (a < 1), a, torch.ones_like(a)))
    inf = over(torch.amax, torch.isinf(a).to(torch.float64)) > 0 if a.numel() else torch.zeros_like(large).bool()
    underflow = small < TINY[dt]  # subnormal: precision lost, and 0 in some order
    return torch.where(underflow & (inf | (large > 1)), torch.full_like(large, math.inf), large)


def bound_mean(ts, dts, p):
    # mean sums, then divides (as numpy, PyTorch and MLX): the sum can overflow where the mean does not
    # (PyTorch's and numpy's float32 mean of values near FLT_MAX are inf too).
    return reduce_scale("sum")(ts, dts, p)


for _n in ["sum", "mean", "prod", "max", "min", "all", "any", "var", "std", "logsumexp"]:
    Op(_n, gen_reduce(_n), reduce_ref(_n), grad=_n not in ("all", "any"), scale=reduce_scale(_n),
       rtol=4.0 if _n in ("var", "std", "mean", "logsumexp") else 1.0,
       bound={"prod": bound_prod, "mean": bound_mean}.get(_n))


def gen_arg(name):
    def gen(g, big):
        dt = pick_dtype(g)
        shape = g.large_shape() if big else g.shape()
        # Ties: small integer values make many; NaN counts as the largest (numpy, torch).
        inp = make_input(g, dt, shape, lo=-3 if dt in INTS else None, hi=3 if dt in INTS else None)
        axis = None if not shape or g.r.random() < 0.3 else g.r.randrange(-len(shape), len(shape))
        return [inp], {"axis": axis, "keepdims": g.r.random() < 0.3}
    return gen


def arg_ref(name):
    def ref(ts, dts, p):
        t, dt = ts[0], dts[0]
        x = t.to(torch.float64) if dt not in FLOATS else t
        if dt == "int64":
            x = t  # float64 would merge neighbours of 2**63
        deviation("argmax_dtype")
        ax = p["axis"]
        if ax is None:
            if x.numel() == 0:
                raise ValueError("empty")
            f = x.reshape(-1)
            # torch.argmax returns the first maximal index with NaN counting as the maximum.
            r = (torch.argmax if name == "argmax" else torch.argmin)(f)
            if p["keepdims"]:
                r = r.reshape([1] * t.dim())
            return [(r.to(torch.int32), "int32")]
        if t.shape[ax] == 0:
            raise ValueError("empty")
        r = (torch.argmax if name == "argmax" else torch.argmin)(x, dim=ax, keepdim=p["keepdims"])
        return [(r.to(torch.int32), "int32")]
    return ref


Op("argmax", gen_arg("argmax"), arg_ref("argmax"), grad=False)
Op("argmin", gen_arg("argmin"), arg_ref("argmin"), grad=False)


def gen_softmax(g, big):
    dt = g.r.choice(FLOATS + FLOATS + ["int32"])
    shape = g.large_shape() if big else g.shape(min_rank=1)
    axes = gen_axes(g, len(shape), allow_none=False) or [-1]
    if g.r.random() < 0.5:
        axes = [g.r.choice([-1, len(shape) - 1])]
    return [make_input(g, dt, shape, special=g.r.random() < 0.3)], {"axes": axes}


def softmax_ref(log):
    def ref(ts, dts, p):
        d = floating(dts[0])
        x = cast(ts[0], dts[0], d)
        if x.numel() == 0:
            return [(x.clone(), d)]
        axes = norm_axes(p["axes"], x.dim())
        m = torch.amax(x, dim=axes, keepdim=True).detach()
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        s = x - m
        lse = torch.log(torch.sum(torch.exp(s), dim=axes, keepdim=True))
        r = (s - lse) if log else torch.exp(s - lse)
        # A row holding +inf is NaN throughout (as torch.softmax, whose x - max is inf - inf there).
        posinf = torch.isposinf(x.detach()).any(dim=axes[0], keepdim=True) if len(axes) == 1 else \
            torch.isposinf(x.detach()).sum(dim=axes, keepdim=True) > 0
        return [(torch.where(posinf, torch.full_like(r, math.nan), r), d)]
    return ref


def lse_terms(x, axes):
    """|x - shift| + |logsumexp(x - shift)|: log_softmax is their difference, so its rounding error
    is relative to them, not to the (possibly tiny) result."""
    x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    if x.numel() == 0:
        return None
    m = torch.amax(x, dim=axes, keepdim=True)
    return (x - m).abs() + torch.logsumexp(x - m, dim=axes, keepdim=True).abs() + 1  # + 1: log(sum) of sum >= 1


def scale_log_softmax(ts, dts, p):
    x = cast(ts[0], dts[0], floating(dts[0]))
    return lse_terms(x, norm_axes(p.get("axes", [-1]), x.dim()))


Op("softmax", gen_softmax, softmax_ref(False), rtol=4.0)
Op("log_softmax", gen_softmax, softmax_ref(True), rtol=4.0, scale=scale_log_softmax)


def gen_cumsum(g, big):
    dt = pick_dtype(g)
    shape = g.large_shape() if big else g.shape(min_rank=1)
    return [make_input(g, dt, shape)], {"axis": g.r.randrange(-len(shape), len(shape)),
                                        "reverse": g.r.random() < 0.4, "inclusive": g.r.random() < 0.7}


def ref_cumsum(ts, dts, p):
    t, dt = ts[0], dts[0]
    od = dt
    if dt in ("bool", "uint8"):
        deviation("sum_dtype")
        od = "int32"
    x = t.to(TORCH[od]) if od not in FLOATS else t
    ax = p["axis"] % t.dim()
    if p["reverse"]:
        x = torch.flip(x, [ax])
    r = torch.cumsum(x, dim=ax, dtype=TORCH[od] if od not in FLOATS else None)
    if not p["inclusive"]:
        r = r - x
        if od in FLOATS:  # exclusive scans start from 0, not from x - x (which is NaN for inf)
            r = torch.cat([torch.zeros_like(x.narrow(ax, 0, min(1, x.shape[ax]))),
                           torch.cumsum(x, dim=ax).narrow(ax, 0, max(x.shape[ax] - 1, 0))], dim=ax)
    if p["reverse"]:
        r = torch.flip(r, [ax])
    return [(r, od)]


def scale_cumsum(ts, dts, p):
    if dts[0] not in FLOATS:
        return None
    x = ts[0].abs()
    x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    return ref_cumsum([x], dts, p)[0][0]


Op("cumsum", gen_cumsum, ref_cumsum, scale=scale_cumsum)


# cumprod, cummax, cummin, logcumsumexp: the Scan primitive's other kinds (same generator as cumsum).
def scan_identity(name, dt):
    if name == "cumprod":
        return 1
    if name == "logcumsumexp":
        return -math.inf
    lo, hi = (-math.inf, math.inf) if dt in FLOATS else (0, 1) if dt == "bool" else ILIM[dt]
    return lo if name == "cummax" else hi


def scan_ref(name):
    def ref(ts, dts, p):
        t, dt = ts[0], dts[0]
        od = dt
        if name == "logcumsumexp":
            od = floating(dt)
            x = cast(t, dt, od)
        elif dt == "bool":
            x = t.to(torch.uint8)  # bool: running "and" (cumprod, cummin) / "or" (cummax)
        else:
            x = t
        ax = p["axis"] % t.dim()
        if p["reverse"]:
            x = torch.flip(x, [ax])
        n = x.shape[ax]
        # An exclusive scan is the identity followed by the inclusive scan of all but the last element
        # (scanning that one too and dropping it would let its overflow reach the gradient).
        xs = x if p["inclusive"] else x.narrow(ax, 0, max(n - 1, 0))
        if name == "cumprod":
            deviation("cumprod_dtype")
            r = torch.cumprod(xs, dim=ax, dtype=x.dtype)
        elif name == "cummax":
            r = torch.cummax(xs, dim=ax)[0]
        elif name == "cummin":
            r = torch.cummin(xs, dim=ax)[0]
        else:
            r = torch.logcumsumexp(xs, dim=ax)
        if not p["inclusive"]:
            first = torch.full_like(x.narrow(ax, 0, min(1, n)), scan_identity(name, dt))
            r = torch.cat([first, r], dim=ax)
        if p["reverse"]:
            r = torch.flip(r, [ax])
        if dt == "bool" and name != "logcumsumexp":
            r = r.to(torch.bool)
        return [(r, od)]
    return ref


def scale_cumprod(ts, dts, p):
    if dts[0] not in FLOATS:
        return None
    x = ts[0].abs()
    x = torch.where(torch.isfinite(x), x, torch.ones_like(x))
    return scan_ref("cumprod")([x], dts, p)[0][0].abs()


def scale_logcumsumexp(ts, dts, p):
    # Each step rounds at the magnitude of the running value and of the element added, and the error
    # carries on: the running sum of |y| + |x| along the scan bounds it.
    d = floating(dts[0])
    x = cast(ts[0], dts[0], d)
    y = scan_ref("logcumsumexp")([x], [d], p)[0][0]
    m = y.abs() + x.abs()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return scan_ref_sum(m, p)


def scan_ref_sum(m, p):
    ax = p["axis"] % m.dim()
    if p["reverse"]:
        m = torch.flip(m, [ax])
    r = torch.cumsum(m, dim=ax)
    if p["reverse"]:
        r = torch.flip(r, [ax])
    return r


def bound_cumprod(ts, dts, p):
    # bound_prod along the scan: the running product of the magnitudes above 1 (past the largest
    # finite value the scan overflows where the float64 reference may come back down), and any result
    # where the running product of those below 1 underflows with a factor above 1 or an infinity.
    t, dt = ts[0], dts[0]
    if dt not in FLOATS:
        return None
    a = t.abs()
    run = scan_ref("cumprod")
    large = run([torch.where(torch.isfinite(a) & (a > 1), a, torch.ones_like(a))], ["float64"], p)[0][0]
    small = run([torch.where(torch.isfinite(a) & (a > 0) & (a < 1), a, torch.ones_like(a))], ["float64"], p)[0][0]
    inf = scan_ref("cummax")([torch.isinf(a).to(torch.float64)], ["float64"], p)[0][0] > 0
    underflow = small < TINY[dt]
    return torch.where(underflow & (inf | (large > 1)), torch.full_like(large, math.inf), large)


Op("cumprod", gen_cumsum, scan_ref("cumprod"), scale=scale_cumprod, bound=bound_cumprod)
Op("cummax", gen_cumsum, scan_ref("cummax"))
Op("cummin", gen_cumsum, scan_ref("cummin"))
# jvp=False: PyTorch has no forward-mode derivative of logcumsumexp (its jvp is checked by finite
# differences in tests/ops/scan_test.cpp).
Op("logcumsumexp", gen_cumsum, scan_ref("logcumsumexp"), scale=scale_logcumsumexp, jvp=False)


# median and count_nonzero: compositions (sort, slices, where; not_equal and sum).
def gen_median(g, big):
    dt = pick_dtype(g)
    shape = g.large_shape() if big else g.shape()
    inp = make_input(g, dt, shape, special=g.r.random() < 0.5)
    return [inp], {"axes": gen_axes(g, len(shape)), "keepdims": g.r.random() < 0.3}


def ref_median(ts, dts, p):
    # The middle value, or the mean of the two middle ones, of the sorted values (stable, so that a
    # tie's cotangent goes where Loom's sort sends it); NaN where the values hold a NaN.
    t, dt = ts[0], dts[0]
    d = floating(dt)
    x = cast(t, dt, d)
    axes = norm_axes(p["axes"], t.dim())
    if not axes:
        return [(x.clone(), d)]
    n = 1
    for a in axes:
        n *= t.shape[a]
    if n == 0:
        deviation("median_empty")
        raise ValueError("empty")
    keep = [a for a in range(t.dim()) if a not in axes]
    xt = x.permute(keep + axes).reshape([t.shape[a] for a in keep] + [n])
    srt = torch.sort(xt, dim=-1, stable=True)[0]
    m = srt[..., n // 2] if n % 2 else (srt[..., n // 2 - 1] + srt[..., n // 2]) / 2
    m = torch.where(torch.isnan(xt).any(-1), torch.full_like(m, math.nan), m)
    if p.get("keepdims", False):
        m = m.reshape([1 if a in axes else t.shape[a] for a in range(t.dim())])
    return [(m, d)]


def ref_count_nonzero(ts, dts, p):
    t = ts[0]
    axes = norm_axes(p["axes"], t.dim())
    nz = (t != 0).to(torch.int32)
    if not axes:
        return [(nz, "int32")]
    return [(torch.sum(nz, dim=axes, keepdim=p.get("keepdims", False), dtype=torch.int32), "int32")]


Op("median", gen_median, ref_median)
Op("count_nonzero", gen_median, ref_count_nonzero, grad=False)


def gen_searchsorted(g, big):
    da, dv = pick_dtype(g), pick_dtype(g)
    n = g.r.choice([0, 1, 2, 5, 17]) if not big else 40000
    seq = make_input(g, da, [n], view=False, special=g.r.random() < 0.5,
                     lo=(0 if da == "uint8" else -3) if da in INTS else None, hi=3 if da in INTS else None)
    seq.values = np.sort(seq.values)  # NaN last, as sort puts it (uint8 from 0: no wrapped values)
    shape = g.large_shape() if big else g.shape()
    vals = make_input(g, dv, shape, special=g.r.random() < 0.5,
                      lo=-4 if dv in INTS else None, hi=4 if dv in INTS else None)
    return [seq, vals], {"side": g.r.choice(["left", "right"])}


def ref_searchsorted(ts, dts, p):
    # numpy (NaN orders last) on both operands cast to the promoted dtype; int32 indices.
    deviation("argmax_dtype")
    d = promote(dts[0], dts[1])
    a, v = cast(ts[0], dts[0], d), cast(ts[1], dts[1], d)
    if d == "bool":
        a, v = a.to(torch.uint8), v.to(torch.uint8)
    r = np.searchsorted(a.numpy(), v.numpy().reshape(-1), side=p["side"]).reshape(tuple(v.shape))
    return [(torch.from_numpy(np.asarray(r, dtype=np.int32)), "int32")]


Op("searchsorted", gen_searchsorted, ref_searchsorted, grad=False)


# Shapes.
def gen_shape_op(name):
    def gen(g, big):
        dt = pick_dtype(g)
        shape = g.large_shape() if big else g.shape()
        nd = len(shape)
        inp = make_input(g, dt, shape)
        if name == "reshape":
            n = int(np.prod(shape, dtype=np.int64))
            new = g.shape() if n == 0 else factor(g, n)
            if n == 0 and int(np.prod(new, dtype=np.int64)) != 0:
                new = [0] + new[1:] if new else [0]
            if new and g.r.random() < 0.3 and n:
                new[g.r.randrange(len(new))] = -1
            return [inp], {"shape": new}
        if name == "transpose":
            perm = list(range(nd))
            g.r.shuffle(perm)
            return [inp], {"axes": perm}
        if name == "flatten":
            if nd == 0:
                return [inp], {}
            a = g.r.randrange(nd)
            return [inp], {"start": a, "end": g.r.randrange(a, nd)}
        if name == "swapaxes":
            if nd == 0:
                shape = [3]
                inp = make_input(g, dt, shape)
                nd = 1
            return [inp], {"a": g.r.randrange(-nd, nd), "b": g.r.randrange(-nd, nd)}
        if name == "moveaxis":
            if nd == 0:
                inp = make_input(g, dt, [2])
                nd = 1
            return [inp], {"src": g.r.randrange(-nd, nd), "dst": g.r.randrange(-nd, nd)}
        if name == "squeeze":
            ones = [i for i, d in enumerate(shape) if d == 1]
            if g.r.random() < 0.3:
                return [inp], {"axes": None}
            return [inp], {"axes": g.r.sample(ones, g.r.randint(0, len(ones)))}
        if name == "expand_dims":
            k = g.r.randint(1, 2)
            axes = g.r.sample(range(nd + k), k)
            return [inp], {"axes": axes}
        if name == "broadcast_to":
            target = [d if d != 1 else g.r.choice([1, 3]) for d in shape]
            target = [g.r.choice([2, 1])] * g.r.randint(0, 2) + target
            return [inp], {"shape": target}
        if name == "slice":
            start, stop, strides = [], [], []
            for d in shape:
                s = g.r.choice([1, 1, 2, 3, -1, -2])
                a = g.r.randint(-d - 2, d + 2)
                b = g.r.randint(-d - 2, d + 2)
                start.append(a)
                stop.append(b)
                strides.append(s)
            return [inp], {"start": start, "stop": stop, "strides": strides}
        if name == "tile":
            return [inp], {"reps": [g.r.choice([1, 2, 3, 0] if g.r.random() < 0.1 else [1, 2, 3])
                                    for _ in range(g.r.randint(max(0, nd - 1), nd + 1))]}
        if name == "repeat":
            axis = None if nd == 0 or g.r.random() < 0.3 else g.r.randrange(-nd, nd)
            return [inp], {"repeats": g.r.choice([0, 1, 2, 3]), "axis": axis}
        raise AssertionError(name)
    return gen


def factor(g, n):
    dims = []
    while n > 1 and len(dims) < 5:
        f = g.r.choice([d for d in range(1, n + 1) if n % d == 0][:8])
        dims.append(f)
        n //= f
    dims.append(n)
    g.r.shuffle(dims)
    return dims


def shape_ref(name):
    def ref(ts, dts, p):
        t, dt = ts[0], dts[0]
        if name == "reshape":
            r = t.reshape(p["shape"])
        elif name == "transpose":
            r = t.permute(p["axes"])
        elif name == "flatten":
            r = t.flatten(p.get("start", 0), p.get("end", -1)) if t.dim() else t.reshape(1)
        elif name == "swapaxes":
            r = t.transpose(p["a"], p["b"])
        elif name == "moveaxis":
            r = torch.movedim(t, p["src"], p["dst"])
        elif name == "squeeze":
            if p["axes"] is None:
                r = t.squeeze()
            else:
                r = t
                for ax in sorted([x % t.dim() for x in p["axes"]], reverse=True):
                    r = r.squeeze(ax)
        elif name == "expand_dims":
            r = t
            nd = t.dim() + len(p["axes"])
            for ax in sorted(x % nd for x in p["axes"]):
                r = r.unsqueeze(ax)
        elif name == "broadcast_to":
            r = t.expand(p["shape"]) if t.dim() <= len(p["shape"]) else None
            if r is None:
                raise ValueError("rank")
            np.broadcast_shapes(tuple(t.shape), tuple(p["shape"]))
        elif name == "slice":
            r = gather_view(t, list(t.shape), [{"slice": p}])
        elif name == "tile":
            r = t.tile(p["reps"]) if p["reps"] or t.dim() else t.clone()
        elif name == "repeat":
            if p["axis"] is None:
                r = torch.repeat_interleave(t.reshape(-1), p["repeats"])
            else:
                r = torch.repeat_interleave(t, p["repeats"], dim=p["axis"])
        return [(r.clone() if not r.requires_grad else r, dt)]
    return ref


for _n in ["reshape", "transpose", "flatten", "swapaxes", "moveaxis", "squeeze", "expand_dims", "broadcast_to",
           "slice", "tile", "repeat"]:
    Op(_n, gen_shape_op(_n), shape_ref(_n))


def gen_slice_update(g, big):
    dt = pick_dtype(g)
    shape = g.shape(min_rank=1)
    src = make_input(g, dt, shape)
    start, stop, strides = [], [], []
    for d in shape:
        s = g.r.choice([1, 1, 2, -1, -2])
        start.append(g.r.randint(-d - 1, d + 1))
        stop.append(g.r.randint(-d - 1, d + 1))
        strides.append(s)
    p = {"start": start, "stop": stop, "strides": strides}
    sl = view_index(shape, [{"slice": p}]).shape
    ud = dt if g.r.random() < 0.7 else pick_dtype(g)
    return [src, make_input(g, ud, g.broadcastable(list(sl)))], p


def ref_slice_update(ts, dts, p):
    src, upd = ts
    idx = index_tensor(view_index(list(src.shape), [{"slice": p}]))
    u = cast(upd, dts[1], dts[0]).expand(idx.shape)
    flat = src.reshape(-1).clone() if not src.requires_grad else src.reshape(-1) * 1
    flat = flat.index_put((idx.reshape(-1),), u.reshape(-1))
    return [(flat.reshape(src.shape), dts[0])]


Op("slice_update", gen_slice_update, ref_slice_update)


def gen_join(name):
    def gen(g, big):
        dt = pick_dtype(g)
        shape = g.shape(min_rank=0 if name == "stack" else 1)
        k = g.r.randint(1, 4)
        nd = len(shape)
        axis = g.r.randrange(-(nd + (name == "stack")), nd + (name == "stack"))
        ins = []
        for _ in range(k):
            s = list(shape)
            if name == "concatenate":
                s[axis % nd] = g.r.choice([0, 1, 2, 3])
            ins.append(make_input(g, dt if g.r.random() < 0.8 else pick_dtype(g), s))
        return ins, {"axis": axis}
    return gen


def join_ref(name):
    def ref(ts, dts, p):
        d = dts[0]
        for x in dts[1:]:
            d = promote(d, x)
        xs = [cast(t, dt, d) for t, dt in zip(ts, dts)]
        return [((torch.cat if name == "concatenate" else torch.stack)(xs, dim=p["axis"]), d)]
    return ref


Op("concatenate", gen_join("concatenate"), join_ref("concatenate"))
Op("stack", gen_join("stack"), join_ref("stack"))


def gen_split(g, big):
    dt = pick_dtype(g)
    shape = g.shape(min_rank=1)
    axis = g.r.randrange(-len(shape), len(shape))
    n = shape[axis]
    if g.r.random() < 0.5:
        divs = [d for d in range(1, max(n, 1) + 1) if n % d == 0] or [1]
        ind = g.r.choice(divs)
    else:
        ind = sorted(g.r.randint(0, n + 1) for _ in range(g.r.randint(0, 3)))
    return [make_input(g, dt, shape)], {"indices": ind, "axis": axis}


def ref_split(ts, dts, p):
    t = ts[0]
    ax = p["axis"] % t.dim()
    n = t.shape[ax]
    if isinstance(p["indices"], int):
        deviation("split_count")
        k = p["indices"]
        if k <= 0 or n % k:
            raise ValueError("split")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        bounds = [0] + [min(i, n) for i in p["indices"]] + [n]
    outs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        b = max(a, b)
        outs.append((t.narrow(ax, a, b - a), dts[0]))
    return outs


Op("split", gen_split, ref_split)


def gen_pad(g, big):
    dt = pick_dtype(g)
    shape = g.shape()
    width = [[g.r.randint(0, 3), g.r.randint(0, 3)] for _ in shape]
    return [make_input(g, dt, shape), make_input(g, dt, [], view=False)], {"width": width}


def ref_pad(ts, dts, p):
    t, v = ts
    d = dts[0]
    out_shape = [s + a + b for s, (a, b) in zip(t.shape, p["width"])]
    out = cast(v, dts[1], d).expand(out_shape).clone() if out_shape else cast(v, dts[1], d).clone()
    if t.dim() == 0:
        return [(t.clone(), d)]
    sl = tuple(slice(a, a + s) for s, (a, _) in zip(t.shape, p["width"]))
    out = out.index_put(torch.meshgrid(*[torch.arange(s.start, s.stop) for s in sl], indexing="ij"), t)
    return [(out, d)]


Op("pad", gen_pad, ref_pad)


# Linear algebra.
def gen_matmul(g, big):
    dt = g.r.choice(FLOATS + FLOATS + ["int32"])
    m, k, n = [g.r.choice([0, 1, 2, 3, 5, 8, 17, 33, 64] if not big else [64, 128, 200]) for _ in range(3)]
    batch = g.shape(max_rank=2) if g.r.random() < 0.4 else []
    a_shape = g.broadcastable(batch) + [m, k]
    b_shape = g.broadcastable(batch) + [k, n]
    if g.r.random() < 0.15:
        a_shape = [k]
    elif g.r.random() < 0.15:
        b_shape = [k]
    db = dt if g.r.random() < 0.8 else g.r.choice(FLOATS)
    return [make_input(g, dt, a_shape, special=g.r.random() < 0.2),
            make_input(g, db, b_shape, special=g.r.random() < 0.2)], {}


def ref_matmul(ts, dts, p):
    d = promote(dts[0], dts[1])
    if d not in FLOATS:
        deviation("matmul_float_only")
        raise ValueError("matmul of integers")
    a, b = cast(ts[0], dts[0], d), cast(ts[1], dts[1], d)
    if d not in FLOATS:
        return [(torch.matmul(a.to(torch.int64), b.to(torch.int64)).to(TORCH[d]), d)]
    return [(torch.matmul(a, b), d)]


def scale_matmul(ts, dts, p):
    d = promote(dts[0], dts[1])
    if d not in FLOATS:
        return None
    a, b = cast(ts[0], dts[0], d).abs(), cast(ts[1], dts[1], d).abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    b = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
    return torch.matmul(a, b)


Op("matmul", gen_matmul, ref_matmul, scale=scale_matmul)


# einsum: random subscripts over 1 to 3 operands: shared letters (contractions and batch axes), a
# letter repeated in one operand (a diagonal), an ellipsis, size-1 axes against longer ones, explicit
# and implicit outputs. Loom lowers to diagonal / sum / matmul / multiply; torch.einsum is the value.
def gen_einsum(g, big):
    dt = g.r.choice(["float32", "float64", "float32", "float16"])
    pool = "abcdef"
    sizes = {c: g.r.choice([1, 2, 3, 4, 5] if not big else [16, 32, 48]) for c in pool}
    n_ops = g.r.choice([1, 2, 2, 2, 3, 3])
    terms = []
    for _ in range(n_ops):
        k = g.r.randint(0 if n_ops > 1 else 1, 3)
        terms.append("".join(g.r.choice(pool[:4]) for _ in range(k)))
    ell = g.r.random() < 0.15
    ell_shape = [g.r.choice([1, 2, 3]) for _ in range(g.r.randint(1, 2))] if ell else []
    shapes = []
    for t in terms:
        shape = []
        for c in t:
            # A size-1 axis sometimes, where the letter is longer elsewhere (broadcast).
            shape.append(1 if (g.r.random() < 0.1 and not big) else sizes[c])
        # A repeated letter's axes must have one size.
        seen = {}
        for i, c in enumerate(t):
            if c in seen:
                shape[i] = shape[seen[c]]
            else:
                seen[c] = i
        shapes.append(shape)
    subs = ["..." + t if ell and g.r.random() < 0.7 else t for t in terms]
    shapes = [(ell_shape[-g.r.randint(0, len(ell_shape)):] if s.startswith("...") else []) + sh
              for s, sh in zip(subs, shapes)]
    letters = sorted(set("".join(terms)))
    if g.r.random() < 0.5:
        keep = [c for c in letters if g.r.random() < 0.5]
        g.r.shuffle(keep)
        out = ("..." if any(s.startswith("...") for s in subs) else "") + "".join(keep)
        sub = ",".join(subs) + "->" + out
    else:
        sub = ",".join(subs)
    return [make_input(g, dt, sh, special=False) for sh in shapes], {"subscripts": sub}


def ref_einsum(ts, dts, p):
    d = dts[0]
    for x in dts[1:]:
        d = promote(d, x)
    args = [cast(t, dt, "float64") for t, dt in zip(ts, dts)]
    return [(torch.einsum(p["subscripts"], *args), d)]


def scale_einsum(ts, dts, p):
    args = [cast(t, dt, "float64").abs() for t, dt in zip(ts, dts)]
    return torch.einsum(p["subscripts"], *args)


Op("einsum", gen_einsum, ref_einsum, scale=scale_einsum)


# linalg (ops/linalg.h): LAPACK on both sides. Inputs are well conditioned (a diagonal of n added, or
# M M^T / n + I for the symmetric positive definite ones), so values and derivatives compare at the
# usual tolerances. cholesky, eigvalsh and eigh read one triangle and differentiate by it: the
# reference mirrors that triangle first, so torch's gradient lands on it alone, as Loom's does.
LINALG_FLOATS = ["float32", "float64", "float32"]


def _la_batch(g, big):
    return [g.r.choice([1, 2, 3])] if g.r.random() < 0.4 else []


def _la_square(g, big, spd=False, n=None):
    dt = g.r.choice(LINALG_FLOATS)
    n = n or g.r.choice([1, 2, 3, 4, 6] if not big else [32, 64])
    shape = _la_batch(g, big) + [n, n]
    inp = make_input(g, dt, shape, special=False, lo=-1, hi=1, view=False)
    m = inp.values.reshape(shape)
    if spd:
        m = m @ np.swapaxes(m, -1, -2) / n + np.eye(n)
    else:
        m = m + n * np.eye(n)
    inp.values = round_to(m.reshape(-1), dt)
    return inp


def _la_mirror(t, upper):
    return (t.triu() + t.triu(1).mT) if upper else (t.tril() + t.tril(-1).mT)


def gen_la_unary(kind):
    def gen(g, big):
        if kind == "tri_inv":
            return [_la_square(g, big)], {"upper": g.r.random() < 0.5}
        if kind in ("cholesky", "eigvalsh"):
            p = {"upper": g.r.random() < 0.5}
            return [_la_square(g, big, spd=True)], p
        if kind in ("qr", "pinv"):
            dt = g.r.choice(LINALG_FLOATS)
            m, n = g.r.choice([1, 2, 3, 5]), g.r.choice([1, 2, 3, 5])
            inp = make_input(g, dt, _la_batch(g, big) + [m, n], special=False, lo=-1, hi=1, view=False)
            return [inp], {}
        if kind == "norm":
            dt = g.r.choice(LINALG_FLOATS)
            shape = g.shape(min_rank=1, max_rank=3, allow_zero=False)
            matrix = len(shape) >= 2 and g.r.random() < 0.5
            # (A matrix norm's input is no view: a broadcast one is rank-deficient, where the smallest
            # singular value is rounding noise around 0 and its derivative is not defined.)
            inp = make_input(g, dt, shape, special=False, lo=-2, hi=2, view=not matrix)
            if matrix:
                ax = g.r.sample(range(len(shape)), 2)
                ords = [1.0, -1.0, 2.0, -2.0, math.inf, -math.inf, "fro", "nuc"]
            else:
                ax = [g.r.randrange(len(shape))]
                ords = [0.0, 1.0, 2.0, 3.0, 0.5, math.inf, -math.inf]
            o = g.r.choice(ords)
            return [inp], {"ord": o if isinstance(o, str) else ("inf" if o == math.inf else "-inf" if o == -math.inf else o),
                           "axes": ax, "keepdims": g.r.random() < 0.3}
        return [_la_square(g, big)], {}
    return gen


def _ord(o):
    return math.inf if o == "inf" else -math.inf if o == "-inf" else o


def ref_la_unary(kind):
    def ref(ts, dts, p):
        d = dts[0]
        a = ts[0]
        if kind == "inv":
            return [(torch.linalg.inv(a), d)]
        if kind == "tri_inv":
            return [(torch.linalg.inv(a.triu() if p["upper"] else a.tril()), d)]
        if kind == "det":
            return [(torch.linalg.det(a), d)]
        if kind == "slogdet":
            sg, la = torch.linalg.slogdet(a)
            return [(sg, d), (la, d)]
        if kind == "cholesky":
            u = p["upper"]
            c = torch.linalg.cholesky(_la_mirror(a, u))
            return [(c.mT if u else c, d)]
        if kind == "eigvalsh":
            return [(torch.linalg.eigvalsh(_la_mirror(a, p["upper"])), d)]
        if kind == "qr":
            q, r = torch.linalg.qr(a)
            return [(q, d), (r, d)]
        if kind == "pinv":
            return [(torch.linalg.pinv(a), d)]
        if kind == "norm":
            o, ax = _ord(p["ord"]), p["axes"]
            if len(ax) == 1:
                return [(torch.linalg.vector_norm(a, o, dim=ax, keepdim=p["keepdims"]), d)]
            return [(torch.linalg.matrix_norm(a, o, dim=ax, keepdim=p["keepdims"]), d)]
        raise ValueError(kind)
    return ref


def scale_la(ref):
    """Norm-wise magnitudes: every element of an output is compared at the scale of the output's
    largest element over the matrix (LAPACK's errors are bounded norm-wise, not element by element:
    a small entry of a factor carries the rounding of the large ones it was computed from)."""
    def scale(ts, dts, p):
        out = []
        for t, _ in ref(ts, dts, p):
            t = t.to(torch.float64).abs()
            m = t.amax(dim=(-2, -1), keepdim=True) if t.dim() >= 2 else t.amax(dim=-1, keepdim=True) if t.dim() else t
            out.append(m.expand(t.shape).clone())
        return out
    return scale


for _k in ("inv", "tri_inv", "det", "slogdet", "cholesky", "eigvalsh", "qr", "pinv", "norm"):
    # norm's kinks (|x| at 0, max / min ties, sqrt at 0) and qr's and pinv's gauge are the only
    # derivative hazards; the inputs avoid them (no zeros drawn at these sizes, full rank).
    _r = ref_la_unary(_k)
    Op("linalg_" + _k, gen_la_unary(_k), _r, grad_rtol=64.0, scale=None if _k in ("det", "norm") else scale_la(_r))


def gen_la_solve(tri):
    def gen(g, big):
        a = _la_square(g, big)
        n = a.shape[-1]
        bshape = [n] if g.r.random() < 0.3 else _la_batch(g, big) + [n, g.r.choice([1, 2, 3])]
        b = make_input(g, a.dt, bshape, special=False, lo=-1, hi=1, view=False)
        return [a, b], ({"upper": g.r.random() < 0.5} if tri else {})
    return gen


def ref_la_solve(tri):
    def ref(ts, dts, p):
        a, b = ts
        vec = b.dim() == 1
        bm = b.unsqueeze(-1) if vec else b
        if not vec and bm.dim() == a.dim() - 1:
            bm = bm.unsqueeze(0)  # a matrix b (MLX's rule: only a 1-d b is a vector; torch's differs)
        if tri:
            u = p["upper"]
            x = torch.linalg.solve_triangular(a.triu() if u else a.tril(), bm, upper=u)
        elif vec:  # b as the one-column matrix of every batch entry (torch 1.13's own vector path
            # returns a wrongly shaped gradient when n = 1)
            bb = b.expand(tuple(a.shape[:-2]) + (b.shape[0],)).unsqueeze(-1)
            return [(torch.linalg.solve(a, bb).squeeze(-1), promote(dts[0], dts[1]))]
        else:
            x = torch.linalg.solve(a, bm)
        return [(x.squeeze(-1) if vec else x, promote(dts[0], dts[1]))]
    return ref


Op("linalg_solve", gen_la_solve(False), ref_la_solve(False), grad_rtol=64.0, scale=scale_la(ref_la_solve(False)))
Op("linalg_solve_triangular", gen_la_solve(True), ref_la_solve(True), grad_rtol=64.0,
   scale=scale_la(ref_la_solve(True)))


def gen_la_cross(g, big):
    dt = g.r.choice(LINALG_FLOATS)
    shape = g.shape(min_rank=1, max_rank=3, allow_zero=False)
    ax = g.r.randrange(len(shape))
    sa, sb = list(shape), list(shape)
    sa[ax], sb[ax] = g.r.choice([2, 3]), g.r.choice([2, 3])
    return [make_input(g, dt, sa, special=False), make_input(g, dt, sb, special=False)], {"axis": ax - len(shape)}


def ref_la_cross(ts, dts, p):
    a, b = ts
    ax = p["axis"]
    pad = lambda t: torch.cat([t, torch.zeros_like(t.narrow(ax, 0, 1))], ax) if t.shape[ax] == 2 else t
    return [(torch.linalg.cross(pad(a), pad(b), dim=ax), promote(dts[0], dts[1]))]


def scale_la_cross(ts, dts, p):
    a, b = ts
    ax = p["axis"]
    pad = lambda t: torch.cat([t, torch.zeros_like(t.narrow(ax, 0, 1))], ax) if t.shape[ax] == 2 else t
    a, b = pad(a).abs(), pad(b).abs()
    # |a_i b_j| + |a_j b_i| per component: the terms each difference cancels.
    i = lambda t, k: t.narrow(ax, k, 1)
    return torch.cat([i(a, 1) * i(b, 2) + i(a, 2) * i(b, 1), i(a, 2) * i(b, 0) + i(a, 0) * i(b, 2),
                      i(a, 0) * i(b, 1) + i(a, 1) * i(b, 0)], ax)


Op("linalg_cross", gen_la_cross, ref_la_cross, scale=scale_la_cross)


# Indexing and sorting.
def gen_take(g, big):
    dt = pick_dtype(g)
    shape = g.shape(min_rank=1)
    flat = g.r.random() < 0.3
    axis = None if flat else g.r.randrange(-len(shape), len(shape))
    n = int(np.prod(shape)) if flat else shape[axis]
    ishape = g.shape(max_rank=3)
    idt = g.r.choice(["int32", "int64", "uint8"])
    lo = -n if idt != "uint8" else 0
    hi = max(n - 1, 0)
    if g.r.random() < 0.03:
        hi += 2  # out of range now and then: both sides must reject
    vals = g.np.integers(lo, hi + 1, int(np.prod(ishape, dtype=np.int64))) if n or hi else \
        np.zeros(int(np.prod(ishape, dtype=np.int64)), dtype=np.int64)
    return [make_input(g, dt, shape), Input(idt, ishape, vals)], {"axis": axis}


def ref_take(ts, dts, p):
    a, idx = ts
    i = idx.to(torch.int64)
    if p["axis"] is None:
        f = a.reshape(-1)
        n = f.shape[0]
        if ((i < -n) | (i >= n)).any():
            deviation("take_index_bounds")
            raise IndexError("bounds")
        return [(f[torch.where(i < 0, i + n, i)], dts[0])]
    ax = p["axis"] % a.dim()
    n = a.shape[ax]
    if ((i < -n) | (i >= n)).any() and a.numel() // max(n, 1) * i.numel():  # no element to gather: no check
        deviation("take_index_bounds")
        raise IndexError("bounds")
    i = i.clamp(-max(n, 1), max(n - 1, 0))
    i = torch.where(i < 0, i + n, i)
    r = torch.index_select(a, ax, i.reshape(-1))
    return [(r.reshape(list(a.shape[:ax]) + list(i.shape) + list(a.shape[ax + 1:])), dts[0])]


Op("take", gen_take, ref_take)


def gen_along(name):
    def gen(g, big):
        dt = pick_dtype(g) if name != "scatter_add_axis" else g.r.choice(FLOATS + ["int32", "int64"])
        shape = g.shape(min_rank=1)
        axis = g.r.randrange(-len(shape), len(shape))
        ax = axis % len(shape)
        n = shape[ax]
        ishape = [d if g.r.random() < 0.8 else 1 for d in shape]
        ishape[ax] = g.r.choice([0, 1, 2, 3]) if name != "take_along_axis" else g.r.choice([1, 2, 4])
        if n == 0:
            ishape[ax] = 0
        if name == "put_along_axis" and ishape[ax] > 1:
            ishape[ax] = 1  # repeated indices: Loom's last-wins is documented, torch's scatter order is not
        idt = g.r.choice(["int32", "int64"])
        cnt = int(np.prod(ishape, dtype=np.int64))
        vals = g.np.integers(-n, n, cnt) if n else np.zeros(cnt, dtype=np.int64)
        ins = [make_input(g, dt, shape), Input(idt, ishape, vals)]
        if name != "take_along_axis":
            ins.append(make_input(g, dt, ishape))
        return ins, {"axis": axis}
    return gen


def along_ref(name):
    def ref(ts, dts, p):
        a = ts[0]
        ax = p["axis"] % a.dim()
        n = a.shape[ax]
        i = ts[1].to(torch.int64)
        i = torch.where(i < 0, i + n, i)
        if name == "take_along_axis":
            shp = list(torch.broadcast_shapes(tuple(a.shape[:ax]) + (1,) + tuple(a.shape[ax + 1:]),
                                              tuple(i.shape[:ax]) + (1,) + tuple(i.shape[ax + 1:])))
            sa, si = list(shp), list(shp)
            sa[ax], si[ax] = a.shape[ax], i.shape[ax]
            return [(torch.gather(a.expand(sa), ax, i.expand(si)), dts[0])]
        v = cast(ts[2], dts[2], dts[0]).expand(i.shape)
        ie = i.expand(v.shape)
        if name == "put_along_axis":
            full_i = list(a.shape)
            full_i[ax] = ie.shape[ax]
            ie, v = ie.expand(full_i), v.expand(full_i)
            return [(a.scatter(ax, ie, v), dts[0])]
        full_i = list(a.shape)
        full_i[ax] = ie.shape[ax]
        ie, v = ie.expand(full_i), v.expand(full_i)
        return [(a.scatter_add(ax, ie, v), dts[0])]
    return ref


def scale_scatter(ref):
    # Repeated indices accumulate in the array's dtype: errors relative to the sum of magnitudes.
    def scale(ts, dts, p):
        if dts[0] not in FLOATS:
            return None
        a = [torch.where(torch.isfinite(t), t.abs(), torch.zeros_like(t)) if dt in FLOATS else t
             for t, dt in zip(ts, dts)]
        return ref(a, dts, p)[0][0]
    return scale


Op("take_along_axis", gen_along("take_along_axis"), along_ref("take_along_axis"))
Op("put_along_axis", gen_along("put_along_axis"), along_ref("put_along_axis"))
Op("scatter_add_axis", gen_along("scatter_add_axis"), along_ref("scatter_add_axis"),
   scale=scale_scatter(along_ref("scatter_add_axis")), rtol=4.0)


def gen_scatter_add_take(g, big):
    dt = g.r.choice(FLOATS + ["int32", "int64"])
    shape = g.shape(min_rank=1)
    axis = g.r.randrange(-len(shape), len(shape))
    ax = axis % len(shape)
    n = shape[ax]
    ishape = g.shape(max_rank=2)
    cnt = int(np.prod(ishape, dtype=np.int64))
    vals = g.np.integers(-n, n, cnt) if n else np.zeros(cnt, dtype=np.int64)
    ushape = shape[:ax] + ishape + shape[ax + 1:]
    return [make_input(g, dt, shape), Input("int32", ishape, vals), make_input(g, dt, g.broadcastable(ushape))], \
        {"axis": axis}


def ref_scatter_add_take(ts, dts, p):
    a, idx, u = ts
    ax = p["axis"] % a.dim()
    n = a.shape[ax]
    i = idx.to(torch.int64).reshape(-1)
    i = torch.where(i < 0, i + n, i)
    ushape = list(a.shape[:ax]) + list(idx.shape) + list(a.shape[ax + 1:])
    uu = cast(u, dts[2], dts[0]).expand(ushape).reshape(list(a.shape[:ax]) + [i.shape[0]] + list(a.shape[ax + 1:]))
    return [(a.index_add(ax, i, uu), dts[0])]


Op("scatter_add_take", gen_scatter_add_take, ref_scatter_add_take, scale=scale_scatter(ref_scatter_add_take), rtol=4.0)


# MLX's gather and scatters: index arrays broadcast together to B pick windows (starting at the index
# on the indexed axes, at 0 elsewhere); a window that reaches past its axis is an error in Loom (MLX
# reads or writes outside the array), and is checked only when something is read or written.
def gen_windows(g, shape, updates):
    nd = len(shape)
    k = g.r.randint(0, min(nd, 3))
    axes = g.r.sample(range(nd), k)
    win = []
    for d in range(nd):
        n = shape[d]
        if d in axes:
            w = 1 if g.r.random() < 0.7 else g.r.randint(0, n)
        else:
            w = n if g.r.random() < 0.6 else g.r.randint(0, n)
        win.append(min(w, n))
    bshape = g.shape(max_rank=2)
    idx = []
    for ax in axes:
        ishape = g.broadcastable(bshape) if g.r.random() < 0.5 else list(bshape)
        cnt = int(np.prod(ishape, dtype=np.int64))
        n, w = shape[ax], win[ax]
        v = g.np.integers(0, max(n - w, 0) + 1, cnt)
        v = np.where(g.np.random(cnt) < 0.3, v - n, v)
        if g.r.random() < 0.03 and cnt:
            v[0] = n - w + 1  # out of range now and then: both sides must reject
        idt = g.r.choice(["int32", "int64", "uint8"])
        if idt == "uint8":  # it cannot hold negative indices
            v = np.where(v < 0, v + n, v)
        idx.append(Input(idt, ishape, v if n else np.zeros(cnt, dtype=np.int64)))
    axes_p = [ax - nd if g.r.random() < 0.3 else ax for ax in axes]
    return idx, axes, axes_p, win


def window_positions(shape, idx, axes, win):
    """Flat positions in an array of `shape` of every (index tuple, window position), as numpy of shape
    B + win; raises IndexError when a window does not fit and something would be touched."""
    arrs = [np.asarray(i, dtype=np.int64) for i in idx]
    b = np.broadcast_shapes(*[x.shape for x in arrs]) if arrs else ()
    arrs = [np.broadcast_to(x, b) for x in arrs]
    total = int(np.prod(b, dtype=np.int64)) * int(np.prod(win, dtype=np.int64))
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    base = np.zeros(b, dtype=np.int64)
    for x, ax in zip(arrs, axes):
        n, w = shape[ax], win[ax]
        y = np.where(x < 0, x + n, x)
        if total and ((y < 0) | (y + w > n)).any():
            deviation("scatter_gather_window_bounds")
            raise IndexError("window out of bounds")
        base = base + y * strides[ax]
    inner = np.zeros(win, dtype=np.int64)
    for d, w in enumerate(win):
        sh = [1] * len(win)
        sh[d] = w
        inner = inner + np.arange(w, dtype=np.int64).reshape(sh) * strides[d]
    return base.reshape(tuple(b) + (1,) * len(win)) + inner.reshape((1,) * len(b) + tuple(win))


def gen_gather(g, big):
    dt = pick_dtype(g)
    shape = g.shape()
    idx, axes, axes_p, win = gen_windows(g, shape, False)
    return [make_input(g, dt, shape)] + idx, {"axes": axes_p, "slice_sizes": win}


def ref_gather(ts, dts, p):
    a = ts[0]
    nd = a.dim()
    axes = [ax % nd for ax in p["axes"]]
    pos = window_positions(list(a.shape), [t.numpy() for t in ts[1:]], axes, p["slice_sizes"])
    return [(a.reshape(-1)[torch.from_numpy(pos.reshape(-1).copy())].reshape(pos.shape), dts[0])]


Op("gather", gen_gather, ref_gather)


def gen_scatter(mode):
    def gen(g, big):
        dt = pick_dtype(g) if mode != "prod" else g.r.choice(["bool"] + INTS + FLOATS)
        shape = g.shape()
        idx, axes, axes_p, win = gen_windows(g, shape, True)
        b = list(np.broadcast_shapes(*[tuple(i.shape) for i in idx])) if idx else []
        ud = dt if g.r.random() < 0.8 else pick_dtype(g)
        return [make_input(g, dt, shape)] + idx + [make_input(g, ud, b + win)], {"axes": axes_p}
    return gen


def scatter_ref(mode):
    def ref(ts, dts, p):
        a, u = ts[0], ts[-1]
        nd = a.dim()
        axes = [ax % nd for ax in p["axes"]]
        win = list(u.shape[u.dim() - nd:])
        pos = window_positions(list(a.shape), [t.numpy() for t in ts[1:-1]], axes, win).reshape(-1)
        uu = cast(u, dts[-1], dts[0]).reshape(-1)
        flat = a.reshape(-1) * 1 if a.requires_grad else a.reshape(-1).clone()
        if pos.size == 0:
            return [(flat.reshape(a.shape), dts[0])]
        if mode == "none":
            # The last write to a position wins (MLX's CPU order); only it is written.
            last = np.zeros(pos.size, dtype=bool)
            _, first_from_end = np.unique(pos[::-1], return_index=True)
            last[pos.size - 1 - first_from_end] = True
            keep = torch.from_numpy(np.nonzero(last)[0])
            out = flat.index_put((torch.from_numpy(pos[last].copy()),), uu[keep])
            return [(out.reshape(a.shape), dts[0])]
        P = torch.from_numpy(pos.copy())
        if dts[0] == "bool":  # or / and / max / min of bools, computed on integers
            deviation("scatter_bool_logical")
            fi, ui = flat.to(torch.int64), uu.to(torch.int64)
            red = {"add": "sum", "prod": "prod", "max": "amax", "min": "amin"}[mode]
            out = fi.scatter_reduce(0, P, ui, red, include_self=True) != 0
            return [(out.reshape(a.shape), dts[0])]
        if mode == "add":
            return [(flat.index_put((P,), uu, accumulate=True).reshape(a.shape), dts[0])]
        red = {"prod": "prod", "max": "amax", "min": "amin"}[mode]
        out = flat.scatter_reduce(0, P, uu, red, include_self=True)
        if dts[0] in FLOATS and mode != "prod":  # NaN from either side wins, as maximum / minimum
            nan = torch.zeros_like(flat, dtype=torch.bool).index_put((P,), torch.isnan(uu), accumulate=True)
            out = torch.where(nan | torch.isnan(flat), torch.full_like(out, math.nan), out)
        return [(out.reshape(a.shape), dts[0])]
    return ref


def scale_windows(mode):
    # Repeated positions accumulate in the array's dtype: errors relative to the op applied to the
    # magnitudes of the array and the updates (integer updates too; the index arrays stay as they are).
    def scale(ts, dts, p):
        if dts[0] not in FLOATS:
            return None

        def mag(t):
            t = t if t.is_floating_point() else t.to(torch.float64)
            return torch.where(torch.isfinite(t), t.abs(), torch.ones_like(t) if mode == "prod" else torch.zeros_like(t))
        return scatter_ref(mode)([mag(ts[0])] + list(ts[1:-1]) + [mag(ts[-1])], dts, p)[0][0]
    return scale


def bound_scatter_prod(ts, dts, p):
    # As bound_prod, per position, over the array's value and the updates that land there: Loom
    # multiplies them in the array's dtype one at a time (as MLX), so a partial product can overflow or
    # underflow where the reference's float64 product does not.
    if dts[0] not in FLOATS:
        return None

    def pick(t, keep):
        a = (t if t.is_floating_point() else t.to(torch.float64)).abs()
        return torch.where(torch.isfinite(a) & keep(a), a, torch.ones_like(a))

    def over(f):
        return scatter_ref("prod")([f(ts[0])] + list(ts[1:-1]) + [f(ts[-1])], dts, p)[0][0]
    large = over(lambda t: pick(t, lambda a: a > 1))
    small = over(lambda t: pick(t, lambda a: (a > 0) & (a < 1)))
    inf = over(lambda t: torch.where(torch.isinf(t.to(torch.float64)), torch.full_like(t, 2.0, dtype=torch.float64),
                                     torch.ones_like(t, dtype=torch.float64))) > 1
    return torch.where((small < TINY[dts[0]]) & (inf | (large > 1)), torch.full_like(large, math.inf), large)


Op("scatter", gen_scatter("none"), scatter_ref("none"))
Op("scatter_add", gen_scatter("add"), scatter_ref("add"), scale=scale_windows("add"), rtol=4.0)
Op("scatter_prod", gen_scatter("prod"), scatter_ref("prod"), grad=False, scale=scale_windows("prod"),
   bound=bound_scatter_prod, rtol=16.0)
# max / min: gradients at ties differ on purpose (MLX gives each tied side the whole cotangent, PyTorch
# splits it), and special values make ties common; IndexingGrad.ScatterMaxMin checks them.
Op("scatter_max", gen_scatter("max"), scatter_ref("max"), grad=False)
Op("scatter_min", gen_scatter("min"), scatter_ref("min"), grad=False)


def gen_masked_scatter(g, big):
    dt = pick_dtype(g)
    shape = g.shape()
    mk = g.r.randint(0, len(shape))
    mshape, rest = shape[:mk], shape[mk:]
    m = g.np.integers(0, 2, int(np.prod(mshape, dtype=np.int64))).astype(bool)
    rows = int(m.sum())
    r = g.r.random()
    if r < 0.15:
        sshape = []  # a scalar fills every masked position
    elif rest and r < 0.3:
        sshape = [rest[-1]]  # broadcast to every row (MLX)
    elif rest and r < 0.45:
        sshape = [max(rows, 1)] + [1] * len(rest)
    else:
        extra = g.r.choice([0, 0, 0, 1, 3])
        if rows and g.r.random() < 0.03:
            extra = -1  # too few: both sides must reject
        sshape = [max(rows + extra, 0)] + list(rest)
    sd = dt if g.r.random() < 0.8 else pick_dtype(g)
    return [make_input(g, dt, shape), Input("bool", mshape, m), make_input(g, sd, sshape)], {}


def ref_masked_scatter(ts, dts, p):
    a, m, s = ts
    rest = list(a.shape[m.dim():])
    sv = cast(s, dts[2], dts[0])
    if sv.dim() > len(rest) + 1:
        raise ValueError("src has too many dimensions")
    if sv.dim() < len(rest) + 1:
        sv = sv.reshape([1] * (len(rest) + 1 - sv.dim()) + list(sv.shape)).expand([m.numel()] + rest)
    elif list(sv.shape[1:]) != rest:
        sv = sv.expand([sv.shape[0]] + rest)
    full_m = m.reshape(list(m.shape) + [1] * len(rest)).expand(a.shape)
    if int(full_m.sum()) > sv.numel():
        raise ValueError("src too small")
    flat = a.reshape(-1) * 1 if a.requires_grad else a.reshape(-1).clone()
    sel = torch.nonzero(full_m.reshape(-1)).reshape(-1)
    out = flat.index_put((sel,), sv.reshape(-1)[:sel.numel()])
    return [(out.reshape(a.shape), dts[0])]


Op("masked_scatter", gen_masked_scatter, ref_masked_scatter)


def gen_as_strided(g, big):
    dt = pick_dtype(g)
    shape = g.shape(min_rank=0)
    n = int(np.prod(shape, dtype=np.int64))
    oshape = g.shape(max_rank=3)
    strides = [g.r.choice([0, 1, 1, 2, 3, -1, -2, 5]) for _ in oshape]
    lo = sum(s * (d - 1) for s, d in zip(strides, oshape) if s < 0 and d > 0)
    hi = sum(s * (d - 1) for s, d in zip(strides, oshape) if s > 0 and d > 0)
    if hi - lo < n:
        offset = g.r.randint(-lo, n - 1 - hi)
    else:
        offset = g.r.randint(0, 3)  # reaches outside: both sides must reject
    return [make_input(g, dt, shape)], {"shape": oshape, "strides": strides, "offset": offset}


def ref_as_strided(ts, dts, p):
    a = ts[0]
    shape, strides, off = p["shape"], p["strides"], p["offset"]
    pos = np.full(shape, off, dtype=np.int64)
    for d, (n, s) in enumerate(zip(shape, strides)):
        sh = [1] * len(shape)
        sh[d] = n
        pos = pos + np.arange(n, dtype=np.int64).reshape(sh) * s
    if pos.size and (pos.min() < 0 or pos.max() >= a.numel()):
        deviation("as_strided_bounds")
        raise IndexError("as_strided reaches outside the array")
    return [(a.reshape(-1)[torch.from_numpy(pos.reshape(-1).copy())].reshape(shape), dts[0])]


Op("as_strided", gen_as_strided, ref_as_strided)


def slice_update_mode_ref(mode):
    def ref(ts, dts, p):
        src, upd = ts
        idx = index_tensor(view_index(list(src.shape), [{"slice": p}]))
        u = cast(upd, dts[1], dts[0]).expand(idx.shape).reshape(-1)
        flat = src.reshape(-1) * 1 if src.requires_grad else src.reshape(-1).clone()
        i = idx.reshape(-1)
        cur = flat[i]
        if dts[0] == "bool":
            deviation("scatter_bool_logical")
            ci, ui = cur.to(torch.int64), u.to(torch.int64)
            v = {"add": ci + ui, "prod": ci * ui, "max": torch.maximum(ci, ui), "min": torch.minimum(ci, ui)}[mode] != 0
        elif mode == "add":
            v = cur + u
        elif mode == "prod":
            v = cur * u
        elif mode == "max":
            v = torch.maximum(cur, u)
        else:
            v = torch.minimum(cur, u)
        return [(flat.index_put((i,), v).reshape(src.shape), dts[0])]
    return ref


for _m in ["add", "prod", "max", "min"]:
    # max / min: no gradients compared (ties: see scatter_max); IndexingGrad.SliceUpdateReduce checks them.
    Op("slice_update_" + _m, gen_slice_update, slice_update_mode_ref(_m), grad=_m in ("add", "prod"),
       rtol=4.0 if _m == "prod" else 1.0)


def gen_sort(name):
    def gen(g, big):
        dt = pick_dtype(g) if name not in ("topk",) else g.r.choice(INTS + FLOATS)
        shape = g.large_shape() if big else g.shape(min_rank=1)
        axis = g.r.randrange(-len(shape), len(shape))
        inp = make_input(g, dt, shape, lo=-3 if dt in INTS else None, hi=3 if dt in INTS else None)
        p = {"axis": axis}
        n = shape[axis]
        if name == "topk":
            p["k"] = g.r.randint(0, n)
        if name in ("partition", "argpartition"):
            if n == 0:
                shape[axis] = 1
                inp = make_input(g, dt, shape)
                n = 1
            p["kth"] = g.r.randrange(-n, n)
        return [inp], p
    return gen


def sort_key(t, dt):
    return t.to(torch.float64) if dt in ("bool", "uint8", "int32") else t


def sort_ref(name):
    def ref(ts, dts, p):
        t, dt = ts[0], dts[0]
        ax = p["axis"]
        if name == "sort":
            if dt == "bool":
                return [(torch.sort(t.to(torch.uint8), dim=ax, stable=True)[0].to(torch.bool), dt)]
            return [(torch.sort(t, dim=ax, stable=True)[0], dt)]
        if name == "argsort":
            deviation("argmax_dtype")
            return [(torch.sort(sort_key(t, dt), dim=ax, stable=True)[1].to(torch.int32), "int32")]
        if name == "topk":
            deviation("topk_order")
            s = torch.sort(t, dim=ax, stable=True)[0]
            n = t.shape[ax]
            return [(s.narrow(ax, n - p["k"], p["k"]), dt)]
        if name in ("partition", "argpartition"):
            deviation("partition")  # check_partition checks the result against a full sort
            s = torch.sort(sort_key(t, dt), dim=ax, stable=True)
            if name == "argpartition":
                return [(s[1].to(torch.int32), "int32")]
            return [(s[0].to(TORCH[dt]) if dt not in FLOATS else s[0], dt)]
        raise AssertionError(name)
    return ref


for _n in ["sort", "argsort", "topk", "partition", "argpartition"]:
    Op(_n, gen_sort(_n), sort_ref(_n), grad=_n in ("sort", "topk"))


# Convolution and pooling (channels-last).
def gen_conv(g, big):
    dt = g.r.choice(["float32", "float64", "float16", "bfloat16"])
    nsp = g.r.choice([1, 2, 2, 3])
    groups = g.r.choice([1, 1, 2])
    cin = groups * g.r.choice([1, 2, 3])
    cout = groups * g.r.choice([1, 2])
    k = [g.r.choice([1, 2, 3]) for _ in range(nsp)]
    kd = [g.r.choice([1, 1, 2]) for _ in range(nsp)]
    idil = [g.r.choice([1, 1, 2]) for _ in range(nsp)]
    stride = [g.r.choice([1, 1, 2, 3]) for _ in range(nsp)]
    plo = [g.r.choice([0, 0, 1, 2]) for _ in range(nsp)]
    phi = [g.r.choice([0, 0, 1, 2]) for _ in range(nsp)]
    sp = []
    for i in range(nsp):
        need = (k[i] - 1) * kd[i] + 1 - plo[i] - phi[i]
        lo = max(1, -(-(need - 1) // idil[i]) + 1)
        sp.append(g.r.randint(lo, lo + 5))
    n = g.r.choice([1, 2])
    x = make_input(g, dt, [n] + sp + [cin], special=g.r.random() < 0.1)
    w = make_input(g, dt, [cout] + k + [cin // groups], special=False)
    return [x, w], {"stride": stride, "padding_lo": plo, "padding_hi": phi, "kernel_dilation": kd,
                    "input_dilation": idil, "groups": groups, "flip": g.r.random() < 0.2}


def ref_conv(ts, dts, p):
    d = promote(dts[0], dts[1])
    x, w = cast(ts[0], dts[0], d), cast(ts[1], dts[1], d)
    nsp = x.dim() - 2
    # Input dilation: scatter into a zero tensor; then explicit padding; then torch's conv (NCHW).
    xs = x.movedim(-1, 1)
    if any(v > 1 for v in p["input_dilation"]):
        shp = list(xs.shape[:2]) + [(s - 1) * di + 1 for s, di in zip(xs.shape[2:], p["input_dilation"])]
        z = xs.new_zeros(shp)
        sl = (slice(None), slice(None)) + tuple(slice(None, None, di) for di in p["input_dilation"])
        z = z.index_put(tuple(torch.meshgrid(*[torch.arange(s)[sl_] if isinstance(sl_, slice) else None
                                               for s, sl_ in zip(shp, sl)], indexing="ij")), xs) \
            if False else _dilate(xs, p["input_dilation"])
        xs = z
    pads = []
    for lo, hi in reversed(list(zip(p["padding_lo"], p["padding_hi"]))):
        pads += [lo, hi]
    xs = torch.nn.functional.pad(xs, pads)
    ws = w.movedim(-1, 1)
    if p["flip"]:
        ws = torch.flip(ws, list(range(2, 2 + nsp)))
    f = [torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d][nsp - 1]
    r = f(xs, ws, stride=p["stride"], dilation=p["kernel_dilation"], groups=p["groups"])
    return [(r.movedim(1, -1), d)]


def _dilate(xs, dil):
    out = xs
    for i, di in enumerate(dil):
        if di == 1:
            continue
        ax = 2 + i
        n = out.shape[ax]
        shp = list(out.shape)
        shp[ax] = (n - 1) * di + 1
        idx = torch.arange(n) * di
        z = out.new_zeros(shp)
        out = z.index_copy(ax, idx, out)
    return out


def scale_conv(ts, dts, p):
    a = [torch.where(torch.isfinite(t), t.abs(), torch.zeros_like(t)) for t in ts]
    return ref_conv(a, dts, dict(p))[0][0]


Op("conv_general", gen_conv, ref_conv, scale=scale_conv, rtol=4.0)


# conv3d and conv_transpose{1,2,3}d: Loom's weight is (C_out, K..., C_in / groups) for all of them;
# PyTorch's transposed weight is (C_in, C_out / groups, K...). Stride, padding (also beyond
# dilation * (K - 1), which crops), dilation, output_padding below max(stride, dilation), groups (3-d
# too: a Loom extension of MLX). Special values are left to conv_general, which runs the same kernel.
def gen_conv_nd(transposed, nsp):
    def gen(g, big):
        dt = g.r.choice(FLOATS)
        groups = g.r.choice([1, 1, 2])
        cin, cout = groups * g.r.choice([1, 2, 3]), groups * g.r.choice([1, 2])
        k = [g.r.choice([1, 2, 3]) for _ in range(nsp)]
        dil = [g.r.choice([1, 1, 2]) for _ in range(nsp)]
        stride = [g.r.choice([1, 1, 2, 3]) for _ in range(nsp)]
        pad = [g.r.choice([0, 0, 1, 2, 3]) for _ in range(nsp)]
        opad, sp = [0] * nsp, []
        for i in range(nsp):
            ext = dil[i] * (k[i] - 1) + 1
            if transposed:
                if g.r.random() < 0.5:
                    opad[i] = g.r.randint(0, max(stride[i], dil[i]) - 1)
                sp.append(g.r.randint(1, 4))
                if (sp[i] - 1) * stride[i] - 2 * pad[i] + ext + opad[i] < 1:
                    pad[i] = 0
            else:
                sp.append(g.r.randint(max(1, ext - 2 * pad[i]), max(1, ext - 2 * pad[i]) + 4))
        x = make_input(g, dt, [g.r.choice([1, 2])] + sp + [cin], special=False)
        w = make_input(g, dt, [cout] + k + [cin // groups], special=False)
        p = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
        if transposed:
            p["output_padding"] = opad
        return [x, w], p
    return gen


def ref_conv_nd(transposed, nsp):
    def ref(ts, dts, p):
        d = promote(dts[0], dts[1])
        x, w = cast(ts[0], dts[0], d), cast(ts[1], dts[1], d)
        xs, G = x.movedim(-1, 1), p["groups"]
        F = torch.nn.functional
        if not transposed:
            f = [F.conv1d, F.conv2d, F.conv3d][nsp - 1]
            r = f(xs, w.movedim(-1, 1), stride=p["stride"], padding=p["padding"], dilation=p["dilation"], groups=G)
        else:
            cout, cg, ks = w.shape[0], w.shape[-1], list(w.shape[1:-1])
            wt = w.reshape(G, cout // G, *ks, cg).permute(0, nsp + 2, 1, *range(2, nsp + 2))
            wt = wt.reshape(G * cg, cout // G, *ks)
            f = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][nsp - 1]
            r = f(xs, wt, stride=p["stride"], padding=p["padding"], output_padding=p["output_padding"], groups=G,
                  dilation=p["dilation"])
        return [(r.movedim(1, -1), d)]
    return ref


def scale_conv_nd(transposed, nsp):
    def scale(ts, dts, p):
        return ref_conv_nd(transposed, nsp)([t.abs() for t in ts], dts, p)[0][0]
    return scale


Op("conv3d", gen_conv_nd(False, 3), ref_conv_nd(False, 3), scale=scale_conv_nd(False, 3), rtol=4.0)
for _n in (1, 2, 3):
    Op("conv_transpose%dd" % _n, gen_conv_nd(True, _n), ref_conv_nd(True, _n), scale=scale_conv_nd(True, _n),
       rtol=4.0)


def gen_pool(name):
    def gen(g, big):
        dt = g.r.choice(FLOATS)
        nsp = g.r.choice([1, 2, 2, 3])
        k = [g.r.choice([1, 2, 3]) for _ in range(nsp)]
        stride = [g.r.choice([1, 2, 3]) for _ in range(nsp)] if g.r.random() < 0.7 else []
        pad = [g.r.randint(0, kk // 2) for kk in k] if g.r.random() < 0.5 else []
        sp = [g.r.randint(kk, kk + 5) for kk in k]
        x = make_input(g, dt, [g.r.choice([1, 2])] + sp + [g.r.choice([1, 3])], special=g.r.random() < 0.2)
        return [x], {"kernel": k, "stride": stride, "padding": pad}
    return gen


def pool_ref(name):
    def ref(ts, dts, p):
        x = ts[0]
        nsp = x.dim() - 2
        k = p["kernel"]
        s = p["stride"] or k
        pd = p["padding"] or [0] * nsp
        xs = x.movedim(-1, 1)
        if name == "max_pool":
            f = [torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d, torch.nn.functional.max_pool3d][nsp - 1]
            r = f(xs, k, s, pd)
        else:
            f = [torch.nn.functional.avg_pool1d, torch.nn.functional.avg_pool2d, torch.nn.functional.avg_pool3d][nsp - 1]
            r = f(xs, k, s, pd, count_include_pad=True)
        return [(r.movedim(1, -1), dts[0])]
    return ref


def pool_magnitudes(ts, dts, p):
    x = ts[0].abs()
    return pool_ref("avg_pool")([torch.where(torch.isfinite(x), x, torch.zeros_like(x))], dts, p)[0][0]


def bound_avg_pool(ts, dts, p):  # the window's sum, before the division
    return pool_magnitudes(ts, dts, p) * math.prod(p["kernel"])


Op("max_pool", gen_pool("max_pool"), pool_ref("max_pool"))
# avg_pool sums each window, then divides: its error is relative to the mean magnitude in the window
# (values that cancel), and the sum may overflow where the mean does not.
Op("avg_pool", gen_pool("avg_pool"), pool_ref("avg_pool"), rtol=4.0, scale=pool_magnitudes, bound=bound_avg_pool)


# Fused ops and losses.
def gen_rows(name):
    def gen(g, big):
        dt = g.r.choice(FLOATS + FLOATS + ["int32"])
        shape = g.large_shape() if big else g.shape(min_rank=1)
        ins = [make_input(g, dt, shape, special=g.r.random() < 0.2, extreme=name not in ("layer_norm", "rms_norm"))]
        p = {}
        if name in ("layer_norm", "rms_norm"):
            for _ in range(g.r.randint(0, 2 if name == "layer_norm" else 1)):
                ins.append(make_input(g, dt if dt in FLOATS else "float32", [shape[-1]], special=False))
            p["eps"] = g.r.choice([1e-5, 1e-3])
        return ins, p
    return gen


def rows_ref(name):
    def ref(ts, dts, p):
        for w in ts[1:]:  # weight and bias: (x.shape[-1],) in MLX (rms_norm checks it) and PyTorch
            if list(w.shape) != [ts[0].shape[-1]]:
                raise ValueError("weight of shape %s for x of shape %s" % (list(w.shape), list(ts[0].shape)))
        d = floating(dts[0])
        for x in dts[1:]:
            d = promote(d, x)
        x = cast(ts[0], dts[0], d)
        if name in ("fast_softmax", "fast_log_softmax"):
            return softmax_ref(name == "fast_log_softmax")([x], [d], {"axes": [-1]})
        if name == "gelu":
            return [(x * (1 + torch.erf(x / math.sqrt(2))) / 2, d)]
        if name == "layer_norm":
            m = x.mean(-1, keepdim=True)
            v = ((x - m) ** 2).mean(-1, keepdim=True)
            y = (x - m) / torch.sqrt(v + p["eps"])
        else:
            y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + p["eps"])
        if len(ts) > 1:
            y = y * cast(ts[1], dts[1], d)
        if len(ts) > 2:
            y = y + cast(ts[2], dts[2], d)
        return [(y, d)]
    return ref


def rows_scale(name):
    def scale(ts, dts, p):
        x = cast(ts[0], dts[0], floating(dts[0]))
        if name == "fast_log_softmax":
            return lse_terms(x, [x.dim() - 1])
        if name == "gelu":  # 1 + erf(x / sqrt 2) cancels for negative x: the error is relative to |x|
            return torch.where(torch.isfinite(x), x.abs(), torch.zeros_like(x))
        if name == "layer_norm" and x.numel():  # x - mean cancels: error relative to |x| / sqrt(var + eps)
            xf = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
            r = xf.abs().amax(-1, keepdim=True) / torch.sqrt(xf.var(-1, unbiased=False, keepdim=True) + p["eps"])
            for t, dt in zip(ts[1:], dts[1:]):
                r = r * t.abs().amax() + (t.abs().amax() if t is ts[-1] and len(ts) == 3 else 0)
            return r.expand(x.shape)
        return None
    return scale


for _n in ["fast_softmax", "fast_log_softmax", "gelu", "layer_norm", "rms_norm"]:
    Op(_n, gen_rows(_n), rows_ref(_n), rtol=8.0, scale=rows_scale(_n))


def gen_sdpa(g, big):
    dt = g.r.choice(FLOATS)
    lead = g.shape(max_rank=2, allow_zero=False)
    L, S, E, Ev = [g.r.choice([1, 2, 3, 5, 8, 16]) for _ in range(4)]
    ins = [make_input(g, dt, lead + [L, E], special=False), make_input(g, dt, lead + [S, E], special=False),
           make_input(g, dt, lead + [S, Ev], special=False)]  # attention of NaN / inf: not this tester's topic
    if g.r.random() < 0.4:
        if g.r.random() < 0.5:
            m = make_input(g, "bool", g.broadcastable(lead + [L, S]), view=False)
            # Every row attends somewhere: a fully masked row is softmax of a constant (documented).
            mv = np.asarray(m.values).reshape(m.shape)
            if mv.size and mv.ndim:
                mv[..., 0] = True
            elif mv.size:
                mv = np.ones_like(mv)
            m.values = mv.reshape(-1)
            ins.append(m)
        else:
            ins.append(make_input(g, dt, g.broadcastable(lead + [L, S]), special=False))
    return ins, {"scale": g.r.choice([1.0, 0.5, 1 / math.sqrt(E)])}


def ref_sdpa(ts, dts, p):
    d = promote(promote(dts[0], dts[1]), dts[2])
    q, k, v = [cast(t, dt, d) for t, dt in zip(ts[:3], dts[:3])]
    s = p["scale"] * torch.matmul(q, k.transpose(-1, -2))
    if len(ts) > 3:
        if dts[3] == "bool":
            s = torch.where(ts[3], s, torch.full_like(s, -FMAX["float32"] if d != "float64" else -FMAX["float64"]))
        else:
            s = s + cast(ts[3], dts[3], d)
    return [(torch.matmul(torch.softmax(s, -1), v), d)]


def scale_sdpa(ts, dts, p):
    d = promote(promote(dts[0], dts[1]), dts[2])
    q, k, v = [cast(t, dt, d) for t, dt in zip(ts[:3], dts[:3])]
    w = torch.softmax(p["scale"] * torch.matmul(q, k.transpose(-1, -2)), -1)
    return torch.matmul(w, v.abs()) * (1 + p["scale"] * q.abs().amax() * k.abs().amax())


Op("sdpa", gen_sdpa, ref_sdpa, rtol=16.0, scale=scale_sdpa, grad_rtol=64.0)


def gen_ce(g, big):
    dt = g.r.choice(FLOATS + ["int32"])
    shape = g.shape(min_rank=1, allow_zero=False)
    axis = -1 if g.r.random() < 0.7 else g.r.randrange(-len(shape), len(shape))
    c = shape[axis]
    tshape = [s for i, s in enumerate(shape) if i != axis % len(shape)]
    cnt = int(np.prod(tshape, dtype=np.int64))
    targets = Input(g.r.choice(["int32", "int64", "uint8"]), tshape, g.np.integers(0, c, cnt))
    # Non-finite logits are not covered yet (see README.md).
    return [make_input(g, dt, shape, special=False), targets], {
        "axis": axis, "label_smoothing": g.r.choice([0.0, 0.0, 0.1]),
        "reduction": g.r.choice(["none", "mean", "sum"])}


def ref_ce(ts, dts, p):
    d = floating(dts[0])
    x = cast(ts[0], dts[0], d)
    ax = p["axis"] % x.dim()
    deviation("cross_entropy_targets")
    t = ts[1].to(torch.int64)
    lse = torch.logsumexp(x, ax)
    score = torch.gather(x, ax, t.unsqueeze(ax)).squeeze(ax)
    ls = p["label_smoothing"]
    loss = lse - (1 - ls) * score - ls * x.mean(ax)
    if p["reduction"] == "mean":
        loss = loss.mean()
    elif p["reduction"] == "sum":
        loss = loss.sum()
    return [(loss, d)]


def scale_ce(ts, dts, p):
    # The loss is logsumexp minus the score: its error is relative to their magnitudes.
    x = cast(ts[0], dts[0], floating(dts[0])).abs()
    x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    ax = p["axis"] % x.dim()
    loss = 2 * torch.amax(x, ax) + math.log(x.shape[ax])
    if p["reduction"] == "mean":
        return loss.mean() if loss.numel() else None
    if p["reduction"] == "sum":
        return loss.sum()
    return loss


Op("cross_entropy", gen_ce, ref_ce, rtol=8.0, scale=scale_ce)


# Random chains of elementwise ops (fusion's territory: sizes of 256 and up fuse).
CHAIN_UNARY = ["negative", "abs", "square", "sqrt", "exp", "log1p", "sin", "cos", "tanh", "sigmoid", "floor",
               "erf", "reciprocal"]
CHAIN_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


def chain_steps(g, k, p_unary, unary_ops, binary_ops):
    """2-8 random steps over k input registers, each a unary (probability p_unary) or binary op of
    earlier registers; returns the steps and the register count."""
    steps, nreg = [], k
    for _ in range(g.r.randint(2, 8)):
        if g.r.random() < p_unary:
            steps.append([g.r.choice(unary_ops), g.r.randrange(nreg)])
        else:
            steps.append([g.r.choice(binary_ops), g.r.randrange(nreg), g.r.randrange(nreg)])
        nreg += 1
    return steps, nreg


def gen_chain(g, big):
    dt = g.r.choice(FLOATS + FLOATS + ["int32"])
    shape = g.large_shape() if big else (g.shape() if g.r.random() < 0.5 else [g.r.choice([256, 300, 1000, 4097])])
    k = g.r.randint(1, 3)
    ins = [make_input(g, dt if i == 0 or g.r.random() < 0.8 else g.r.choice(FLOATS),
                      shape if i == 0 else g.broadcastable(shape), special=g.r.random() < 0.3, lo=-2.0, hi=2.0)
           for i in range(k)]
    steps, nreg = chain_steps(g, k, 0.5, CHAIN_UNARY, CHAIN_BINARY)
    steps[-1] = steps[-1][:1] + [nreg - 2 if nreg - 2 >= k else 0] + steps[-1][2:]
    return ins, {"steps": steps}


def run_chain(ts, dts, steps, perturb=None):
    """The chain's registers, each step computed by its op's reference and rounded to its dtype.
    perturb = (step index, factor): that step's result is multiplied by the factor (before rounding).
    With gradients on, each use of a register is a copy of its own, broadcast to the step's shape,
    kept in TERMS: the gradients of these copies are the terms summed into a register's gradient."""
    regs = list(zip(ts, dts))
    for n, step in enumerate(steps):
        args = [regs[i] for i in step[1:]]
        xs = [a[0] for a in args]
        if any(x.requires_grad for x in xs) and perturb is None:
            shape = torch.broadcast_shapes(*[x.shape for x in xs])
            xs = [x.expand(shape).clone() if x.requires_grad else x for x in xs]
            TERMS.extend(x for x in xs if x.requires_grad)
        (t, d), = OPS[step[0]].ref(xs, [a[1] for a in args], {})
        if perturb is not None and perturb[0] == n and d in FLOATS:
            t = t * perturb[1]
        regs.append((rt(t, d) if d in FLOATS else t, d))
    return regs


def ref_chain(ts, dts, p):
    return [run_chain(ts, dts, p["steps"])[-1]]


def chain_finite(case):
    """True when every step of a chain is finite and, for half types, no step comes near the top of
    the range (derivative conventions at infinities, and half-precision overflow inside the chain
    rule, are not what the tester checks: known_differences half_grad_intermediates)."""
    regs = [(viewed(base_tensor(i, False), i), i.dt) for i in case["_inputs"]]
    for step in case["params"]["steps"]:
        args = [regs[i] for i in step[1:]]
        (t, d), = OPS[step[0]].ref([a[0] for a in args], [a[1] for a in args], {})
        t = rt(t, d) if d in FLOATS else t
        if d in FLOATS and t.numel():
            m = float(t.abs().max())
            if not math.isfinite(m) or (d in ("float16", "bfloat16") and m > 256) or (m > 1e30):
                return False
            nz = t.abs()[t != 0]
            if nz.numel() and float(nz.min()) < (1e-2 if d in ("float16", "bfloat16") else 1e-15):
                return False
        regs.append((t, d))
    return True


def scale_chain(ts, dts, p):
    # Rounding errors grow along the chain: the largest magnitude any step saw bounds them.
    regs = run_chain(ts, dts, p["steps"])
    big = 0.0
    for t, d in regs[len(ts):]:
        if d in FLOATS and t.numel():
            f = t.detach().abs()
            f = f[torch.isfinite(f)]
            if f.numel():
                big = max(big, float(f.max()))
    out, dout = regs[-1]
    if dout not in FLOATS:
        return torch.tensor(big * len(p["steps"]), dtype=torch.float64)
    # And each step's own error, as far as the rest of the chain carries it: the change of the
    # result when that step's value moves by its dtype's tolerance (up or down), summed over the
    # steps. A float32 step inside a float64 chain keeps float32's error; a step near a singularity
    # of the next (log1p of about -1) gives an unbounded change (+inf: any value agrees).
    cond = torch.zeros_like(out, dtype=torch.float64)
    for n, step in enumerate(p["steps"]):
        d = regs[len(ts) + n][1]
        if d not in FLOATS:
            continue
        worst = torch.zeros_like(cond)
        for f in (1 + RTOL[d], 1 - RTOL[d]):
            o = run_chain(ts, dts, p["steps"], (n, f))[-1][0].to(torch.float64)
            diff = (o - out).abs()
            diff = torch.where(torch.isnan(o) != torch.isnan(out), torch.full_like(diff, math.inf), diff)
            worst = torch.maximum(worst, torch.nan_to_num(diff, nan=0.0))
        cond = cond + worst
    return big * len(p["steps"]) + cond / RTOL[dout]


Op("chain", gen_chain, ref_chain, scale=scale_chain)

# Quantization (ops/quantized.h). PyTorch has no MLX quantization: the reference quantizes w with a
# numpy copy of MLX's CPU affine kernel (float32 arithmetic, as tests/ops/quantized_ref.py) and
# compares quantized_matmul with x @ dequantize(w).T (or x @ dequantize(w)); the vjp and jvp are
# those of x (quantize is a constant to autograd in both). E4M3 conversions against the nearest
# finite E4M3 value (ties to the even code), saturating at 448 as MLX does.
def np_affine_dequantized(w, gs, bits, out=np.float32):
    """MLX's CPU quantize of the float32 matrix w along its last axis, then dequantized in `out`
    (q * scale, then + bias, each rounded: float64 when x is float64, as Loom computes then)."""
    f32 = np.float32
    shape = w.shape
    g = np.asarray(w, dtype=f32).reshape(-1, gs)
    n_bins, eps = f32((1 << bits) - 1), f32(1e-7)
    w_max, w_min = g.max(axis=1), g.min(axis=1)
    mask = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / n_bins, eps).astype(f32)
    scale = np.where(mask, scale, -scale).astype(f32)
    edge = np.where(mask, w_min, w_max).astype(f32)
    q0 = np.rint(edge / scale).astype(f32)
    nz = q0 != 0
    scale = np.where(nz, edge / np.where(nz, q0, f32(1)), scale).astype(f32)
    bias = np.where(nz, edge, f32(0)).astype(f32)
    q = np.clip(np.rint(((g - bias[:, None]) / scale[:, None]).astype(f32)), 0, n_bins).astype(f32)
    q, scale, bias = q.astype(out), scale.astype(out), bias.astype(out)
    return ((q * scale[:, None]).astype(out) + bias[:, None]).astype(out).reshape(shape)


def gen_quantized_matmul(g, big):
    gs = g.r.choice([32, 64, 128])
    bits = g.r.choice([2, 3, 4, 5, 6, 8])
    transpose = g.r.random() < 0.7
    n = g.r.choice([1, 3, 8, 17] if not big else [64, 200])
    k = gs * g.r.choice([1, 2] if not big else [2, 4])
    m = g.r.choice([1, 2, 5, 8])
    x_shape = (g.broadcastable(g.shape(max_rank=2)) if g.r.random() < 0.3 else []) + [m, k]
    if g.r.random() < 0.15:
        x_shape = [k]
    if not transpose:  # w is (K, N) quantized along N: N a multiple of the group size
        n = gs * g.r.choice([1, 2])
    w_shape = [n, k] if transpose else [k, n]
    dx = g.r.choice(["float32", "float32", "float64"])
    return [make_input(g, dx, x_shape, special=False), make_input(g, "float32", w_shape, special=False, view=False)], \
        {"group_size": gs, "bits": bits, "transpose": transpose}


def quantized_weight(ts, dts, p):
    out = np.float64 if promote(dts[0], "float32") == "float64" else np.float32
    w = np_affine_dequantized(ts[1].detach().numpy().astype(np.float32), p["group_size"], p["bits"], out)
    w = torch.tensor(w.astype(np.float64))
    return w.t() if p["transpose"] else w


def ref_quantized_matmul(ts, dts, p):
    d = promote(dts[0], "float32")
    return [(torch.matmul(cast(ts[0], dts[0], d), quantized_weight(ts, dts, p)), d)]


def scale_quantized_matmul(ts, dts, p):
    return torch.matmul(ts[0].detach().abs(), quantized_weight(ts, dts, p).abs())


def gen_dequantize(g, big):
    gs = g.r.choice([32, 64, 128])
    shape = g.shape(max_rank=2, allow_zero=False, min_rank=1) + [gs * g.r.choice([1, 2])]
    return [make_input(g, "float32", shape, special=False, view=False)], {"group_size": gs, "bits": g.r.choice([2, 3, 4, 5, 6, 8])}


def ref_dequantize(ts, dts, p):
    w = np_affine_dequantized(ts[0].detach().numpy().astype(np.float32), p["group_size"], p["bits"])
    return [(torch.tensor(w.astype(np.float64)), "float32")]


def e4m3_codes(x):
    """Nearest finite E4M3 code of each value (ties to the even code), saturating at 448 (0x7E)."""
    vals = np.array([(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
                     for e in range(16) for m in range(8)][:127])
    a = np.abs(x)
    i = np.clip(np.searchsorted(vals, a), 1, 126)
    lo, hi = vals[i - 1], vals[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (i % 2 == 0))
    code = np.where(pick_hi, i, i - 1)
    code = np.where(~np.isfinite(a) | (a >= 448.0), 0x7E, code)
    # A NaN's sign does not survive the JSON wire ("nan"): the runner sees +NaN, which gives 0x7E.
    return (code | np.where(np.signbit(x) & ~np.isnan(x), 0x80, 0)).astype(np.int64)


def gen_to_fp8(g, big):
    dt = g.r.choice(FLOATS)
    shape = g.shape()
    inp = make_input(g, dt, shape)
    if g.r.random() < 0.5:  # the E4M3 range, subnormals included
        inp.values[:] = round_to(g.np.standard_normal(len(inp.values)) * g.r.choice([0.01, 1.0, 100.0]), dt)
    return [inp], {}


def ref_to_fp8(ts, dts, p):
    return [(torch.tensor(e4m3_codes(ts[0].detach().numpy().reshape(-1)).reshape(tuple(ts[0].shape))).to(torch.uint8),
             "uint8")]


def gen_from_fp8(g, big):
    return [make_input(g, "uint8", g.shape(), lo=0, hi=255)], {"dtype": g.r.choice(FLOATS)}


def ref_from_fp8(ts, dts, p):
    c = ts[0].to(torch.int64)
    e, m = (c >> 3) & 15, (c & 7).to(torch.float64)
    v = torch.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * torch.pow(2.0, (e - 7).to(torch.float64)))
    v = torch.where(c & 128 != 0, -v, v)  # 0x7F / 0xFF read +-480, as MLX
    return [(v, p["dtype"])]


Op("quantized_matmul", gen_quantized_matmul, ref_quantized_matmul, scale=scale_quantized_matmul)


# gather_qmm (MLX's semantics, ops.cpp and python/tests/test_quantized.py): output i is x's matrix
# lhs_indices[i] times w's dequantized matrix rhs_indices[i] (indices into the flattened batch axes;
# an absent one is arange over its operand's batch shape), over the broadcast shape of the indices.
# The reference gathers x and dequantize(w) with the indices and multiplies in float64; its vjp and
# jvp are x's (autograd through the gather adds the cotangents of repeated lhs indices).
def gen_gather_qmm(g, big):
    gs = g.r.choice([32, 64])
    bits = g.r.choice([2, 3, 4, 5, 6, 8])
    transpose = g.r.random() < 0.7
    k = gs * g.r.choice([1, 2])
    n = g.r.choice([1, 3, 8]) if transpose else gs
    m = g.r.choice([1, 2, 5])
    wb = [g.r.choice([1, 2, 3, 4]) for _ in range(g.r.choice([1, 1, 2]))]
    xb = [g.r.choice([1, 2, 3]) for _ in range(g.r.choice([0, 1, 1, 2]))]
    nx, nw = int(np.prod(xb, dtype=np.int64)), int(np.prod(wb, dtype=np.int64))
    lhs, rhs = g.r.random() < 0.6, g.r.random() < 0.85
    if not lhs and not rhs and g.r.random() < 0.8:
        rhs = True  # neither: quantized_matmul of the stacks (MLX), now and then
    # Index shapes: both broadcast to one shape (an absent index has its operand's batch shape).
    ishape = list(xb) if not lhs else list(wb) if not rhs else [g.r.choice([1, 2, 3, 5]) for _ in range(g.r.randint(0, 2))]
    ins = [make_input(g, g.r.choice(["float32", "float32", "float64"]), xb + [m, k], special=False),
           make_input(g, "float32", wb + ([n, k] if transpose else [k, n]), special=False, view=False)]
    for present, count in ((lhs, nx), (rhs, nw)):
        if present:
            sh = g.broadcastable(ishape) if g.r.random() < 0.4 else list(ishape)
            cnt = int(np.prod(sh, dtype=np.int64))
            v = g.np.integers(0, count, cnt)
            if g.r.random() < 0.03 and cnt:
                v[0] = count  # out of range now and then: both sides must reject
            ins.append(Input(g.r.choice(["int32", "int64", "uint8"]), sh, v))
    # sorted_indices is a hint for MLX's GPU kernels: the result must not depend on it.
    return ins, {"group_size": gs, "bits": bits, "transpose": transpose, "lhs": lhs, "rhs": rhs,
                 "sorted": g.r.random() < 0.2}


def gather_qmm_operands(ts, dts, p):
    """x's matrices, w's dequantized matrices (each (K, N)) and the two index arrays, broadcast."""
    d = promote(dts[0], "float32")
    x = cast(ts[0], dts[0], d)
    out = np.float64 if d == "float64" else np.float32
    w = np_affine_dequantized(ts[1].detach().numpy().astype(np.float32), p["group_size"], p["bits"], out)
    w = torch.tensor(w.astype(np.float64))
    w = w.reshape([-1] + list(w.shape[-2:]))
    if p["transpose"]:
        w = w.transpose(-1, -2)
    xb, wb = list(x.shape[:-2]), list(ts[1].shape[:-2])
    nx, nw = int(np.prod(xb, dtype=np.int64)), int(np.prod(wb, dtype=np.int64))
    rest = iter(ts[2:])
    li = next(rest).to(torch.int64) if p["lhs"] else torch.arange(nx).reshape(xb)
    ri = next(rest).to(torch.int64) if p["rhs"] else torch.arange(nw).reshape(wb)
    li, ri = torch.broadcast_tensors(li, ri)
    if ((li < 0) | (li >= nx)).any() or ((ri < 0) | (ri >= nw)).any():
        raise IndexError("gather_qmm index out of range")
    return d, x.reshape([-1] + list(x.shape[-2:])), w, li, ri


def ref_gather_qmm(ts, dts, p):
    d, x, w, li, ri = gather_qmm_operands(ts, dts, p)
    out = torch.matmul(x[li.reshape(-1)], w[ri.reshape(-1)])
    return [(out.reshape(list(li.shape) + list(out.shape[-2:])), d)]


def scale_gather_qmm(ts, dts, p):
    d, x, w, li, ri = gather_qmm_operands(ts, dts, p)
    out = torch.matmul(x.abs()[li.reshape(-1)], w.abs()[ri.reshape(-1)])
    return out.reshape(list(li.shape) + list(out.shape[-2:]))


Op("gather_qmm", gen_gather_qmm, ref_gather_qmm, scale=scale_gather_qmm)
Op("dequantize", gen_dequantize, ref_dequantize, grad=False, rtol=0.0)
Op("to_fp8", gen_to_fp8, ref_to_fp8, grad=False)
Op("from_fp8", gen_from_fp8, ref_from_fp8, grad=False)

WEIGHTS = {"chain": 6, "matmul": 3, "conv_general": 2, "sum": 2, "mean": 2}


# ---- hadamard_transform and view (ops/hadamard.cpp, ops/view.cpp) ----
HADAMARD_SIZES = [1, 2, 4, 8, 12, 16, 20, 24, 28, 40, 48, 56, 64, 80, 112, 256]
_HAD_M = {  # Sloane's matrices, as ops/hadamard.cpp (and MLX) use them, rows of '+'/'-'
    12: "+-++++++++++--+-+-+-+-+-+++-++----+++---+--+-++-+++++-++----+-+---+--+-+++--+++-++--+--++---+--+"
        "++----+++-+++--+-++---+-++++----+++-+-+--+-++---",
    20: "+----+----++--++-++--+----+---+++---+-++--+----+---+++-+-+-+---+----+---+++++-+-----+----++--++-++-+"
        "-+++++-----+--+++--++-+++-+---+-+--+++--++-++--+---+-+--+++-+++-+---+---+-+--+++++++-----++--+-+--++"
        "--++-+-++-+-----++++---++-+-++-+---+-++++---++-+-+--+--++-++++---++-+----+-+++-+-++---++-+----+++++-"
        "-+--+--++-+----+----+-+-----++-+----+----+-+-+---+--+----+----+-+++------+----+-+--+--++------+----+",
    28: "+------++----++-+--+-+--++---+-----+++-----+-+--+-+--++---+-----+++---+-+-+----+--++---+-----+++---+"
        "-+-+-+--+--+----+-----+++---+-+-+++--+-------+-----++++--+-+--++--+-------++----++-+--+-+--++--+--++"
        "++-+-------++--+++-+--+----++++-+-----+-++--+-+-+--++---+++--+----++-++--+-+-+--++---++---+----++-++"
        "--+-+-+-+++---+----+----++-++--+-+-+++++--------+-+--++-++--+-+--++++--------+++--++--+--+-+-+-++-++"
        "--++--+--------++++-+-+-++--+--++--+--------++++-+-+-++--+--++--+----+---++++-+-+-++--+--+---+---++-"
        "--++++-+-+-++--+------+--+++---+-++-+-+-++--+------+-++++---+-++-+---++--+------+-++++---++--++-+-++"
        "-+++----++------+-++--++-+-++-+++-----+-----++-++---+-+-++-+++-----+-----++-++-+-+-+-+--+++-----+---"
        "--++-++++-+-+----+++-----+--+--++-+-++-+-+----+++-----+-++--++-+-++-+-+----++------+",
}


def hadamard_matrix(n):
    """kron(H_m, S_p) for n = m * p: S_p the Sylvester matrix, built in numpy."""
    for m in (1, 12, 20, 28):
        p = n // m
        if n % m == 0 and p & (p - 1) == 0:
            hm = np.ones((1, 1)) if m == 1 else \
                np.array([1.0 if c == "+" else -1.0 for c in _HAD_M[m]]).reshape(m, m)
            s = np.ones((1, 1))
            while s.shape[0] < p:
                s = np.block([[s, s], [s, -s]])
            return np.kron(hm, s)
    raise ValueError(n)


def gen_hadamard(g, big):
    dt = g.r.choice(FLOATS + FLOATS + ["int32", "uint8"])
    if big:
        shape = [g.r.choice([40, 80]), g.r.choice([512, 768, 1024])]
    else:
        shape = g.shape(min_rank=1, allow_zero=False)
        shape[-1] = g.r.choice(HADAMARD_SIZES)
    p = {} if g.r.random() < 0.5 else {"scale": g.r.choice([1.0, 0.5, -0.25, 0.1])}
    return [make_input(g, dt, shape, special=False)], p


def _hadamard_scale(ts, p):
    n = ts[0].shape[-1] if ts[0].dim() > 0 else 1
    return float(np.float32(p["scale"])) if "scale" in p else float(np.float32(1.0 / math.sqrt(n)))


def ref_hadamard(ts, dts, p):
    n = ts[0].shape[-1] if ts[0].dim() > 0 else 1
    s = _hadamard_scale(ts, p)
    if n == 1:
        if s == 1.0:
            return [(ts[0].clone(), dts[0])]  # the input itself, integers too (MLX)
        d = dts[0] if dts[0] in FLOATS else "float32"  # a * array(scale, dtype)
        return [(rt(cast(ts[0], dts[0], d) * rt(torch.tensor(s, dtype=torch.float64), d), d), d)]
    d = floating(dts[0])
    x = cast(ts[0], dts[0], d)
    h = torch.from_numpy(hadamard_matrix(n))
    return [(torch.matmul(x, h.t()) * s, d)]


def scale_hadamard(ts, dts, p):
    d = floating(dts[0])
    x = cast(ts[0], dts[0], d).abs()
    return x.sum(-1, keepdim=True).expand(x.shape) * abs(_hadamard_scale(ts, p))


Op("hadamard_transform", gen_hadamard, ref_hadamard, scale=scale_hadamard)


def gen_view(g, big):
    dt, to = pick_dtype(g), pick_dtype(g)
    ratio = max(torch.tensor([], dtype=TORCH[dt]).element_size(), torch.tensor([], dtype=TORCH[to]).element_size())
    shape = g.shape(min_rank=1)
    shape[-1] = ratio * g.r.choice([0, 1, 1, 2, 3])
    inp = make_input(g, dt, shape, special=True)
    if dt in FLOATS:  # a NaN's bits depend on how each side made it; its bits are what view shows
        inp.values = np.where(np.isnan(inp.values), 0.0, inp.values)
    return [inp], {"dtype": to}


def ref_view(ts, dts, p):
    to = p["dtype"]
    x = ts[0].detach().to(TORCH[dts[0]]).contiguous()
    if x.numel() == 0:  # torch's view checks strides even then
        a, b = x.element_size(), torch.tensor([], dtype=TORCH[to]).element_size()
        shape = list(x.shape[:-1]) + [x.shape[-1] * a // b]
        return [(torch.zeros(shape, dtype=torch.float64 if to in FLOATS else TORCH[to]), to)]
    if to == "bool":
        return [(x.view(torch.uint8) != 0, to)]  # Loom stores a viewed bool as 0 / 1 (ops/view.h)
    y = x.view(TORCH[to])
    return [(y.to(torch.float64) if to in FLOATS else y, to)]


Op("view", gen_view, ref_view, grad=False)


# ---- uint16 / uint32 / uint64: a numpy reference path ----
# PyTorch 1.13 has no uint16/32/64, so cases with them are a family of their own, drawn in place of
# an ordinary case with probability UNSIGNED_FRACTION (from a random stream of their own, so a
# seed's other cases stay as they were). Two kinds of reference:
#  - ops that only move values or compare them with each other (shape and indexing ops, sort, max,
#    argmax, cummax, ...) run their ordinary PyTorch reference on int64 tensors holding the values
#    shifted by an order-preserving offset (uint64: v - 2^63), and shift the results back;
#  - arithmetic, comparisons of mixed dtypes, bitwise ops, shifts, sum / prod / mean, scans, where,
#    clip and astype are computed with numpy, in the dtype MLX's promotion gives (below), which is not
#    numpy's: uint64 with a signed integer is float32 in MLX (numpy: float64), uint32 with int32 is
#    int64 (as numpy). Integer arithmetic wraps in that dtype, as in numpy and MLX.
# No derivatives are compared for this family (integer results; the float ones are plain casts).
UNSIGNED = ["uint16", "uint32", "uint64"]
UNSIGNED_FRACTION = UNSIGNED_FRACTION_DEFAULT = 0.12
UBITS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
SBITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
ILIM.update({"uint16": (0, 2 ** 16 - 1), "uint32": (0, 2 ** 32 - 1), "uint64": (0, 2 ** 64 - 1)})
NPD = {"bool": np.bool_, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
       "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "float16": np.float16,
       "float32": np.float32, "float64": np.float64}
# The dtypes drawn beside the unsigned ones (numpy has no bfloat16; the ordinary cases cover it).
UOTHER = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]


def mlx_promote(a, b):
    """MLX's promotion table (core/dtype.cpp): unsigned with unsigned (or bool) is the wider one;
    uintN with intM is the signed integer of max(2N, M) bits, except uint64 with any signed integer,
    which is float32; an integer with a float is the float."""
    if a == b:
        return a
    if a not in UNSIGNED and b not in UNSIGNED:
        return promote(a, b)
    if a in FLOATS or b in FLOATS:
        return a if a in FLOATS else b
    if a == "bool" or b == "bool":
        return b if a == "bool" else a
    if a in UBITS and b in UBITS:
        return a if UBITS[a] > UBITS[b] else b
    u, s = (a, b) if a in UBITS else (b, a)
    if UBITS[u] == 64:
        return "float32"
    return "int%d" % max(2 * UBITS[u], SBITS[s])


def unsigned_case(case):
    if case["op"] not in UOPS:
        return False
    return any(i.dt in UNSIGNED for i in case["_inputs"]) or case.get("params", {}).get("dtype") in UNSIGNED


def uvalues(g, dt, n, lo=None, hi=None, special=True):
    top = ILIM[dt][1]
    if lo is not None:
        v = [int(x) for x in g.np.integers(lo, hi + 1, n)]
    else:
        k = g.r.choice([3, 40, 40, 1000])  # small ranges make ties (sort, argmax)
        v = [int(x) for x in g.np.integers(0, k + 1, n)]
    if special and n and g.r.random() < 0.4:
        half = 1 << (UBITS[dt] - 1)
        for i in g.np.integers(0, n, max(1, n // 6)):
            v[i] = g.r.choice([top, top - 1, 0, 1, half, half - 1, half + 1, top // 3, 1 << 31, (1 << 32) - 1,
                               1 << 16]) & top
    return np.array(v, dtype=object).astype(NPD[dt])


def uinput(g, dt, shape, lo=None, hi=None, special=True, view=True):
    if dt not in UNSIGNED:
        return make_input(g, dt, shape, lo=lo, hi=hi, special=special, view=view)
    base, recipe = g.view(shape) if view else (list(shape), None)
    return Input(dt, shape, uvalues(g, dt, int(np.prod(base, dtype=np.int64)), lo, hi, special), recipe, base)


def np_values(inp):
    """The input's (viewed) values as numpy in its dtype (floats: float64 holding the dtype's values)."""
    npd = np.float64 if inp.dt in FLOATS else NPD[inp.dt]
    v = np.asarray(inp.values)
    v = (v.astype(object) if v.dtype == object or inp.dt not in FLOATS else v).astype(npd)
    base = v.reshape(inp.base_shape)
    if inp.recipe:
        idx = view_index(inp.base_shape, inp.recipe)
        return base.reshape(-1)[idx.reshape(-1)].reshape(idx.shape)
    return base


def ucast(x, src, dst):
    """numpy values of Loom dtype src converted as Loom converts them to dst (floats: float64 holding
    dst's values; integers wrap; floats to integers saturate, NaN to 0: float_to_int_saturates)."""
    if dst in FLOATS:
        if src in FLOATS:
            return round_to(x, dst)
        if dst == "float64":
            return x.astype(np.float64)
        # Integers straight to the narrow float (through float64 could round twice).
        with np.errstate(all="ignore"):  # beyond float16's range: inf, as Loom
            return x.astype(np.float32 if dst == "float32" else np.float16).astype(np.float64)
    if dst == "bool":
        return x != 0
    if src in FLOATS:
        deviation("float_to_int_saturates")
        lo, hi = ILIM[dst]
        out = []
        for f in x.reshape(-1):
            f = float(f)
            out.append(0 if f != f else hi if f >= hi else lo if f <= lo else int(math.trunc(f)))
        return np.array(out, dtype=object).astype(NPD[dst]).reshape(x.shape)
    return x.astype(NPD[dst])  # integer to integer: C's modular conversion, numpy's astype


def compute_type(d):
    """numpy type Loom computes dtype d in: float32 for float16 (rounded once at the end)."""
    return np.float64 if d == "float64" else np.float32 if d in FLOATS else NPD[d]


def in_type(fn, d, *xs):
    """fn of xs computed in Loom's compute type for d; the result as float64 / d's numpy type. The
    operands are made 1-d at least: numpy 1.24 promotes 0-d arrays by value, so np.where(b == 0, 1, b)
    of a 0-d uint64 b would be float64 and round quotients and powers above 2^53."""
    shape = np.broadcast(*xs).shape
    with np.errstate(all="ignore"):
        r = np.asarray(fn(*[np.atleast_1d(x.astype(compute_type(d))) for x in xs])).reshape(shape)
    return round_to(r.astype(np.float64), d) if d in FLOATS else r.astype(NPD[d])


UCOMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
            "greater": np.greater, "greater_equal": np.greater_equal}
UARITH = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "power": None, "floor_divide": None, "remainder": None,
          "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
          "left_shift": np.left_shift, "right_shift": np.right_shift}


def ushape(g, min_rank=0):
    """A case's shape; now and then one above the parallel threshold (vectorized and threaded kernels)."""
    return g.large_shape() if g.r.random() < 0.03 else g.shape(min_rank=min_rank)


def ugen_binary(name):
    def gen(g, big):
        shape = ushape(g)
        du = g.r.choice(UNSIGNED)
        kinds = UNSIGNED + UOTHER
        if name in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"):
            kinds = [k for k in kinds if k not in FLOATS]
        do = du if g.r.random() < 0.5 else g.r.choice(kinds)
        sa, sb = shape, g.broadcastable(shape)
        lo = hi = None
        if name == "power":
            lo, hi = 0, 8  # small exponents: the integer loop's length is the exponent's bit count anyway
        if "shift" in name:
            lo, hi = (0, 70) if do in UNSIGNED + ["uint8", "bool"] else (-2, 70)  # past every width
        a = uinput(g, du, sa)
        b = uinput(g, do, sb, lo=lo, hi=hi, special=lo is None)
        if g.r.random() < 0.5 and lo is None:
            a, b = b, a
        return [a, b], {}
    return gen


def uref_binary(name):
    def ref(xs, dts, p):
        a, b = xs
        d = mlx_promote(dts[0], dts[1])
        if name in UCOMPARE:
            return [(in_type(UCOMPARE[name], d, ucast(a, dts[0], d), ucast(b, dts[1], d)).astype(bool), "bool")]
        if name == "divide":
            d = floating(d)
        if "shift" in name and d == "bool":
            d = "uint8"  # MLX shifts bools as uint8
        if name.startswith("bitwise") or "shift" in name:
            if d in FLOATS:
                raise TypeError("bitwise ops take integers only (MLX); uint64 with a signed integer is float32")
        if d == "bool" and name in ("subtract", "floor_divide", "remainder"):
            deviation("bool_arith")
            raise TypeError("bool")
        ca, cb = ucast(a, dts[0], d), ucast(b, dts[1], d)
        if d == "bool" and name == "power":
            return [(ca | ~cb, d)]
        if d == "bool":
            return [((ca | cb) if name in ("add", "maximum", "bitwise_or") else (ca ^ cb) if name == "bitwise_xor"
                     else (ca & cb), d)]
        if name in ("floor_divide", "remainder"):
            deviation("int_div_by_zero" if d not in FLOATS else "float_remainder")
            fn = (_int_floor_divide if name == "floor_divide" else _int_remainder) if d not in FLOATS else (
                np.floor_divide if name == "floor_divide" else np.remainder)
            return [(in_type(fn, d, ca, cb), d)]
        if name == "power" and d not in FLOATS:
            return [(in_type(_int_power, d, ca, cb), d)]
        return [(in_type(UARITH[name] or np.power, d, ca, cb), d)]
    return ref


UUNARY = {"abs": np.abs, "negative": np.negative, "sign": np.sign, "square": np.square,
          "bitwise_invert": np.invert, "floor": lambda x: x, "ceil": lambda x: x, "round": lambda x: x,
          "copy": lambda x: x, "stop_gradient": lambda x: x}
UPRED = {"logical_not": lambda x: x == 0, "isnan": lambda x: np.zeros(x.shape, bool),
         "isinf": lambda x: np.zeros(x.shape, bool), "isfinite": lambda x: np.ones(x.shape, bool)}
UFLOAT = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log}


def ugen_unary(g, big):
    return [uinput(g, g.r.choice(UNSIGNED), ushape(g))], {}


def uref_unary(name):
    def ref(xs, dts, p):
        x, dt = xs[0], dts[0]
        if name in UPRED:
            return [(UPRED[name](x), "bool")]
        if name in UFLOAT:
            d = floating(dt)
            with np.errstate(all="ignore"):
                return [(round_to(UFLOAT[name](ucast(x, dt, d)), d), d)]
        with np.errstate(all="ignore"):
            return [(np.asarray(UUNARY[name](x)).astype(NPD[dt]), dt)]  # floor/ceil/round of an integer: itself
    return ref


def ugen_reduce(name):
    def gen(g, big):
        shape = ushape(g)
        lo, hi = (0, 3) if name == "prod" and g.r.random() < 0.5 else (None, None)
        return [uinput(g, g.r.choice(UNSIGNED), shape, lo=lo, hi=hi)], {
            "axes": gen_axes(g, len(shape)), "keepdims": g.r.random() < 0.3}
    return gen


def usum_dtype(dt):
    deviation("sum_dtype")  # MLX: unsigned integers up to 32 bits sum in uint32, uint64 in uint64
    return "uint64" if dt == "uint64" else "uint32"


def uref_reduce(name):
    def ref(xs, dts, p):
        x, dt = xs[0], dts[0]
        axes = tuple(norm_axes(p["axes"], x.ndim))
        keep = p.get("keepdims", False)
        if name in ("all", "any"):
            return [((np.all if name == "all" else np.any)(x != 0, axis=axes, keepdims=keep), "bool")]
        if name == "mean":
            n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
            s = np.sum(ucast(x, dt, "float32"), axis=axes, keepdims=keep)
            deviation("mean_of_empty")
            with np.errstate(all="ignore"):
                return [(round_to(s / n if n else s * math.nan, "float32"), "float32")]
        od = usum_dtype(dt)
        with np.errstate(all="ignore"):
            y = x.astype(NPD[od])
            r = (np.sum if name == "sum" else np.prod)(y, axis=axes, keepdims=keep, dtype=NPD[od]) if axes else y
        return [(np.asarray(r).astype(NPD[od]), od)]
    return ref


def uscale_mean(xs, dts, p):
    return None  # the values are magnitudes: |mean| is the error scale


def ugen_scan(g, big):
    shape = ushape(g, min_rank=1)
    lo, hi = (0, 3) if g.r.random() < 0.5 else (None, None)
    return [uinput(g, g.r.choice(UNSIGNED), shape, lo=lo, hi=hi)], {
        "axis": g.r.randrange(-len(shape), len(shape)), "reverse": g.r.random() < 0.4, "inclusive": g.r.random() < 0.7}


def uref_scan(name):
    def ref(xs, dts, p):
        x, dt = xs[0], dts[0]  # cumsum and cumprod of uint16/32/64 keep the dtype (MLX), wrapping
        ax = p["axis"] % x.ndim
        if p["reverse"]:
            x = np.flip(x, ax)
        n = x.shape[ax]
        fn = np.cumsum if name == "cumsum" else np.cumprod
        with np.errstate(all="ignore"):
            if p["inclusive"]:
                r = fn(x, axis=ax, dtype=NPD[dt])
            else:
                first = np.full_like(np.take(x, range(min(1, n)), axis=ax), 0 if name == "cumsum" else 1)
                r = np.concatenate([first, fn(np.take(x, range(max(n - 1, 0)), axis=ax), axis=ax, dtype=NPD[dt])],
                                   axis=ax)
        if p["reverse"]:
            r = np.flip(r, ax)
        return [(r.astype(NPD[dt]), dt)]
    return ref


def ugen_where(g, big):
    shape = g.shape()
    shapes = [shape, g.broadcastable(shape), g.broadcastable(shape)]
    g.r.shuffle(shapes)
    du = g.r.choice(UNSIGNED)
    do = du if g.r.random() < 0.5 else g.r.choice(UNSIGNED + UOTHER)
    ins = [uinput(g, du, shapes[1]), uinput(g, do, shapes[2])]
    g.r.shuffle(ins)
    return [uinput(g, g.r.choice(["bool", "bool", g.r.choice(UNSIGNED)]), shapes[0])] + ins, {}


def uref_where(xs, dts, p):
    d = mlx_promote(dts[1], dts[2])
    return [(np.where(xs[0] != 0, ucast(xs[1], dts[1], d), ucast(xs[2], dts[2], d)), d)]


def ugen_clip(g, big):
    shape = g.shape()
    du = g.r.choice(UNSIGNED)
    lo, hi = g.r.random() < 0.8, g.r.random() < 0.8
    if not lo and not hi:
        lo = True
    ins = [uinput(g, du, shape)]
    for present in (lo, hi):
        if present:
            ins.append(uinput(g, du if g.r.random() < 0.6 else g.r.choice(UNSIGNED + UOTHER[1:]),
                              g.broadcastable(shape), special=g.r.random() < 0.3))
    return ins, {"lo": lo, "hi": hi}


def uref_clip(xs, dts, p):
    out, d, i = xs[0], dts[0], 1
    for key, pick in (("lo", np.less), ("hi", np.greater)):
        if p[key]:  # as ref_clip: promote step by step; a NaN bound gives NaN
            d2 = mlx_promote(d, dts[i])
            b, o = ucast(xs[i], dts[i], d2), ucast(out, d, d2)
            take = pick(o, b) | np.isnan(b) if d2 in FLOATS else pick(o, b)
            out, d = np.where(take, b, o), d2
            i += 1
    return [(out, d)]


def ugen_astype(g, big):
    shape = ushape(g)
    if g.r.random() < 0.5:
        src, to = g.r.choice(UNSIGNED), g.r.choice(UNSIGNED + UOTHER)
    else:
        src, to = g.r.choice(UOTHER), g.r.choice(UNSIGNED)
    inp = uinput(g, src, shape)
    if src in FLOATS and g.r.random() < 0.5:  # out-of-range values saturate (float_to_int_saturates)
        inp.values = round_to(g.np.standard_normal(len(inp.values)) * g.r.choice([10.0, 1e5, 1e10, 1e19]), src)
    return [inp], {"dtype": to}


def uref_astype(xs, dts, p):
    return [(ucast(xs[0], dts[0], p["dtype"]), p["dtype"])]


class UOp:
    """An op of the unsigned family: its generator and a reference on the whole case."""
    def __init__(self, name, gen, ref, scale=None):
        self.name, self.gen, self.ref, self.scale = name, gen, ref, scale


UOPS = {}


def numpy_uop(name, gen, ref, scale=None):
    UOPS[name] = UOp(name, gen, lambda case: ref([np_values(i) for i in case["_inputs"]],
                                                  [i.dt for i in case["_inputs"]], case.get("params", {})), scale)


for _n in list(UARITH) + list(UCOMPARE):
    numpy_uop(_n, ugen_binary(_n), uref_binary(_n))
for _n in list(UUNARY) + list(UPRED) + list(UFLOAT):
    numpy_uop(_n, ugen_unary, uref_unary(_n))
for _n in ["sum", "prod", "mean", "all", "any"]:
    numpy_uop(_n, ugen_reduce(_n), uref_reduce(_n), scale="value" if _n == "mean" else None)
for _n in ["cumsum", "cumprod"]:
    numpy_uop(_n, ugen_scan, uref_scan(_n))
numpy_uop("where", ugen_where, uref_where)
numpy_uop("clip", ugen_clip, uref_clip)
numpy_uop("astype", ugen_astype, uref_astype)

# Ops that move or compare values: which inputs hold the data (the rest are indices or masks).
UMOVED = {n: [0] for n in ["reshape", "transpose", "flatten", "swapaxes", "moveaxis", "squeeze", "expand_dims",
                           "broadcast_to", "slice", "tile", "repeat", "split", "take", "take_along_axis", "gather",
                           "as_strided", "full", "sort", "argsort", "topk", "max", "min", "argmax", "argmin",
                           "cummax", "cummin"]}
UMOVED.update({"slice_update": [0, 1], "pad": [0, 1], "put_along_axis": [0, 2], "masked_scatter": [0, 2],
               "scatter": [0, -1], "concatenate": None, "stack": None,  # None: every input
               "scatter_max": [0, -1], "scatter_min": [0, -1], "slice_update_max": [0, 1], "slice_update_min": [0, 1]})
# Ops that add or multiply values: their references run on the values' two's complement int64 bits
# (uint64 above 2^63 negative), whose wrapping sums and products are the unsigned ones modulo 2^64,
# then keep the dtype's low bits (uint16 / uint32 wrap as MLX's kernels do).
UWRAPPED = {"scatter_add": [0, -1], "scatter_prod": [0, -1], "slice_update_add": [0, 1], "slice_update_prod": [0, 1],
            "scatter_add_axis": [0, 2], "scatter_add_take": [0, 2]}
# Every unsigned value v is held as v - 2^63: the int64 limits (the identities of exclusive cummax /
# cummin) then map back to 0 and the largest value of each unsigned dtype.
UOFFSET = 1 << 63


def ugen_moved(name):
    def gen(g, big):
        ins, p = OPS[name].gen(g, False)
        du = g.r.choice(UNSIGNED)
        where = UMOVED.get(name, UWRAPPED.get(name))
        pos = where if where is not None else range(len(ins))
        for k in pos:
            i = ins[k]
            ins[k] = Input(du, i.shape, uvalues(g, du, len(i.values)), i.recipe, i.base_shape)
        return ins, p
    return gen


def uref_moved(name):
    def ref(case):
        """The op's PyTorch reference on int64 values v - offset (order-preserving), shifted back."""
        du = next(i.dt for i in case["_inputs"] if i.dt in UNSIGNED)
        off, top = UOFFSET, ILIM[du][1]
        bits = lambda v: int(v) - off if name not in UWRAPPED else int(v) - (1 << 64) if int(v) >= off else int(v)  # noqa: E731
        ins = [Input("int64", i.shape, np.array([bits(v) for v in np.asarray(i.values).reshape(-1)],
                                                  dtype=object), i.recipe, i.base_shape)
               if i.dt in UNSIGNED else i for i in case["_inputs"]]
        _, _, _, outs = reference(dict(case, _inputs=ins), OPS[name], False)
        res = []
        for t, d in outs:
            v = to_np(t, d)
            if d == "int64":
                v = np.array([(int(x) + (off if name not in UWRAPPED else 0)) & top for x in v],
                             dtype=object).astype(NPD[du])
                d = du
            res.append((v.reshape(tuple(t.shape)), d))
        return res
    return ref


for _n in list(UMOVED) + list(UWRAPPED):
    UOPS[_n] = UOp(_n, ugen_moved(_n), uref_moved(_n))


def ugen_view(g, big):
    dt, to = g.r.choice(UNSIGNED), g.r.choice(UNSIGNED + UOTHER)
    if g.r.random() < 0.5:
        dt, to = to, dt
    ratio = max(np.dtype(NPD[dt]).itemsize, np.dtype(NPD[to]).itemsize)
    shape = g.shape(min_rank=1)
    shape[-1] = ratio * g.r.choice([0, 1, 1, 2, 3])
    inp = uinput(g, dt, shape)
    if dt in FLOATS:  # a NaN's bits depend on how each side made it (as gen_view)
        inp.values = np.where(np.isnan(inp.values), 0.0, inp.values)
    return [inp], {"dtype": to}


def uref_view(xs, dts, p):
    to = p["dtype"]
    x = np.ascontiguousarray(xs[0].astype(NPD[dts[0]]))
    if x.ndim == 0:
        raise ValueError("view of a 0-d array")
    if to == "bool":
        return [(x.view(np.uint8) != 0, to)]  # Loom stores a viewed bool as 0 / 1 (ops/view.h)
    y = x.view(NPD[to])
    return [(y.astype(np.float64) if to in FLOATS else y, to)]


numpy_uop("view", ugen_view, uref_view)

# Chains of integer ops on unsigned registers: sizes of 256 and more run through elementwise fusion
# (the runner compares with fusion on and off too), where each step's dtype must survive.
UCHAIN_UNARY = ["negative", "square", "abs", "bitwise_invert", "sign"]
UCHAIN_BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor",
                 "floor_divide", "remainder", "right_shift"]


def ugen_chain(g, big):
    du = g.r.choice(UNSIGNED)
    shape = g.shape() if g.r.random() < 0.4 else [g.r.choice([256, 300, 1000, 4097])]
    k = g.r.randint(1, 3)
    ins = [uinput(g, du if i == 0 or g.r.random() < 0.7 else g.r.choice(UNSIGNED + ["uint8", "int8", "int32", "int64"]),
                  shape if i == 0 else g.broadcastable(shape)) for i in range(k)]
    steps, _ = chain_steps(g, k, 0.4, UCHAIN_UNARY, UCHAIN_BINARY)
    return ins, {"steps": steps}


def uref_chain(xs, dts, p):
    regs = list(zip(xs, dts))
    for step in p["steps"]:
        args = [regs[i] for i in step[1:]]
        ref = uref_unary(step[0]) if len(args) == 1 else uref_binary(step[0])
        (t, d), = ref([a[0] for a in args], [a[1] for a in args], {})
        regs.append((np.asarray(t), d))
    return [regs[-1]]


numpy_uop("chain", ugen_chain, uref_chain)


def make_unsigned_case(g, cid, op_name=None):
    name = op_name or g.r.choice(sorted(UOPS))
    inputs, params = UOPS[name].gen(g, False)
    return {"id": cid, "op": name, "_inputs": inputs, "params": params}


def check_unsigned(case, res):
    """check() for the unsigned family: numpy / shifted-int64 references, no derivatives."""
    op = UOPS[case["op"]]
    try:
        outs = op.ref(case)
    except Exception as e:  # the reference rejects the input
        if "error" in res:
            return []
        return ["reference rejects (%s: %s) but Loom returned %s" % (type(e).__name__, e, summarize(res))]
    if "error" in res:
        return ["Loom throws: %s" % res["error"]]
    problems = []
    for variant, r in [("", res)] + ([("[fusion off] ", res["nofuse"])] if "nofuse" in res else []):
        if "error" in r:
            problems.append(variant + "Loom throws: %s" % r["error"])
            continue
        if len(r["outputs"]) != len(outs):
            problems.append(variant + "%d outputs, expected %d" % (len(r["outputs"]), len(outs)))
            continue
        for k, ((w, d), o) in enumerate(zip(outs, r["outputs"])):
            name = variant + ("output %d" % k if len(outs) > 1 else "value")
            w = np.asarray(w)
            if o["dtype"] != d:
                problems.append("%s: dtype %s, expected %s" % (name, o["dtype"], d))
                continue
            if list(o["shape"]) != list(w.shape):
                problems.append("%s: shape %s, expected %s" % (name, o["shape"], list(w.shape)))
                continue
            want = w.reshape(-1).astype(np.float64 if d in FLOATS else object)
            if d == "bool":
                want = want.astype(bool).astype(np.int64)
            scale = np.abs(want) if op.scale == "value" else None
            msg = compare(dec_values(o["data"], d), want, d, 1.0, scale)
            if msg:
                problems.append("%s: %s" % (name, msg))
    return problems


# ---- the complex64 family ----
# PyTorch has complex64 but no ordering of complex values, and its special-value rules differ from
# numpy's in places, so complex64 cases are a family of their own (like the unsigned one), drawn in
# place of an ordinary case from a stream of their own (`--complex-fraction`). References:
#  - elementwise functions, arithmetic, sums, products, scans, matmul and where in torch.complex128
#    (the complex64 inputs exactly, the result rounded to complex64 once), differentiable: vjps by
#    torch.autograd, jvps by torch.autograd.forward_ad;
#  - orderings (comparisons, maximum / minimum, clip, max / min, argmax / argmin, cummax / cummin,
#    sort / argsort / topk, median) lexicographic as numpy (real part, then imaginary part; NaN
#    propagates through maximum / max), computed with numpy on complex128; their derivatives by
#    selecting (torch.gather / where) the elements numpy picked;
#  - ops that only move, select or add values (shapes, slicing, indexing, scatter_add, pad...): the
#    ordinary PyTorch reference run on the real parts and on the imaginary parts (float32 values) with
#    the same indices and recombined, which is exact for these real-linear ops and keeps their
#    derivatives (torch.real / torch.imag / torch.complex are differentiable).
# Derivative convention (docs/coming-from-mlx.md): the vjp of a holomorphic f is c * conj(f'(z)), of a
# real-valued function of z the gradient d/dRe + i d/dIm; this is exactly what torch.autograd.grad
# returns for complex inputs (its "conjugate Wirtinger" gradient times 2, taken with the cotangent as
# grad_output), so the comparison uses torch's vjps unchanged. A real input feeding a complex result
# gets the real part of its torch gradient (torch gives a real gradient for a real leaf). jvps are
# the complex tangent (torch's forward mode: f'(z) t for holomorphic f).
CDT = "complex64"
COMPLEX_FRACTION = COMPLEX_FRACTION_DEFAULT = 0.03


def complex_case(case):
    # fft's cases are all of this family, rfft's with a real input among them.
    return case["op"] in COPS and (any(i.dt == CDT for i in case["_inputs"])
                                   or case["op"] in ("real", "imag", "conjugate", "fft")
                                   or case.get("params", {}).get("dtype") == CDT)


def cvalues(g, n, special=True, inf_nan=True, lo=None, hi=None):
    """n complex64 values (as complex128): normal parts of a random scale, now and then special parts
    (signed zeros, halves, and with inf_nan NaN and infinities) and repeated values (ties)."""
    sc = g.r.choice([1.0, 1.0, 3.0, 0.1, 30.0])
    if lo is not None:
        re, im = g.np.uniform(lo, hi, n), g.np.uniform(lo, hi, n)
    else:
        re, im = g.np.standard_normal(n) * sc, g.np.standard_normal(n) * sc
    if special and n and g.r.random() < 0.3:
        sp = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5] + ([math.nan, math.inf, -math.inf] if inf_nan else [])
        for i in g.np.integers(0, n, max(1, n // 8)):
            k = g.r.random()
            if k < 0.8:
                (re if k < 0.4 else im)[i] = g.r.choice(sp)
            else:
                re[i], im[i] = g.r.choice(sp), g.r.choice(sp)
    if n > 1 and g.r.random() < 0.2:  # ties: equal values, or equal real parts
        for i in g.np.integers(0, n, max(1, n // 4)):
            j = int(g.np.integers(0, n))
            re[i] = re[j]
            if g.r.random() < 0.6:
                im[i] = im[j]
    z = np.empty(n, dtype=np.complex128)  # not re + 1j * im: 1j * inf is nan + inf j
    z.real, z.imag = round_to(re, "float32"), round_to(im, "float32")
    return z


def cinput(g, shape, view=True, **kw):
    base, recipe = g.view(shape) if view else (list(shape), None)
    return Input(CDT, shape, cvalues(g, int(np.prod(base, dtype=np.int64)), **kw), recipe, base)


def cshape(g, min_rank=0):
    return g.large_shape() if g.r.random() < 0.01 else g.shape(min_rank=min_rank)


def crt(t):
    """A complex128 tensor rounded to complex64 (each part to float32), differentiable."""
    return torch.complex(rt(t.real, "float32"), rt(t.imag, "float32"))


def ccast(t, dt):
    """An input of Loom dtype dt as the complex64 value Loom promotes it to (complex128 tensor)."""
    if dt == CDT:
        return t
    x = cast(t, dt, "float32")
    return torch.complex(x, torch.zeros_like(x))


def _clog1p(z):
    """log(1 + z), accurate for small |z| too (torch has no complex log1p)."""
    small = z.abs() < 1e-3
    zs = torch.where(small, z, torch.zeros_like(z))
    series = zs - zs * zs / 2 + zs ** 3 / 3 - zs ** 4 / 4 + zs ** 5 / 5
    return torch.where(small, series, torch.log(1 + torch.where(small, torch.zeros_like(z), z)))


def _cacosh(z):
    """acosh as log(z + sqrt(z - 1) sqrt(z + 1)): its autograd derivative is the principal branch's,
    1 / (sqrt(z - 1) sqrt(z + 1)); torch.acosh's backward, 1 / sqrt(z^2 - 1), has the wrong sign where
    Re z < 0 (finite differences agree with the first). The values are numpy's (cref_unary).
    z -+ 1 shift only the real part: torch's complex z - 1 turns an imaginary -0 into +0, which moves a
    point on the cut (-1, 1) to its other side (the derivative's sign flips)."""
    zm, zp = torch.complex(z.real - 1, z.imag), torch.complex(z.real + 1, z.imag)
    return torch.log(z + torch.sqrt(zm) * torch.sqrt(zp))


class _Valued(torch.autograd.Function):
    """t's derivatives with v's values. t + (v - t.detach()) would do it but for signed zeros:
    -0 + (-0 - -0) is +0, and the sign of a zero part picks a side of a branch cut downstream."""
    @staticmethod
    def forward(ctx, t, v):
        return v.clone()

    @staticmethod
    def backward(ctx, g):
        return g, None

    @staticmethod
    def jvp(ctx, dt, dv):
        return dt


# Holomorphic unary ops: torch's complex functions (C99 / numpy branch cuts).
CUNARY = {"negative": torch.neg, "square": lambda z: z * z, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
          "reciprocal": torch.reciprocal, "exp": torch.exp, "log": torch.log, "log1p": _clog1p, "log2": torch.log2,
          "log10": torch.log10, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh,
          "sinh": torch.sinh, "cosh": torch.cosh, "arcsin": torch.asin, "arccos": torch.acos, "arctan": torch.atan,
          "arcsinh": torch.asinh, "arccosh": _cacosh, "arctanh": torch.atanh}
# Ops whose value at NaN / infinite parts follows plain IEEE arithmetic on the parts (no C99 Annex G
# special cases, where numpy, PyTorch and std::complex differ): these get NaN and infinities as inputs.
C_INF_NAN_OK = {"negative", "conjugate", "real", "imag", "abs", "isnan", "isinf", "isfinite", "logical_not",
                "round", "add", "subtract", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                "maximum", "minimum", "clip", "where", "astype", "sum", "max", "min", "argmax", "argmin", "all", "any",
                "count_nonzero", "cummax", "cummin", "cumsum", "sort", "argsort", "topk", "copy", "stop_gradient"}
# Ops Loom refuses for complex64 when they are built (docs/coming-from-mlx.md: every op not listed as
# taking complex64): the reference refuses too, and both refusing is agreement.
C_REFUSED_UNARY = ["expm1", "sigmoid", "erf", "erfinv", "floor", "ceil", "bitwise_invert"]
C_REFUSED_BINARY = ["floor_divide", "remainder", "arctan2", "logical_and", "logical_or", "bitwise_and",
                    "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]


class COp:
    """An op of the complex family: generator, reference (ts, dts, params) -> [(tensor, dtype)] with
    complex64 results as complex128 tensors, and its error scale (or None)."""
    def __init__(self, name, gen, ref, grad=True, jvp=None, scale=None):
        self.name, self.gen, self.ref, self.grad, self.scale = name, gen, ref, grad, scale
        self.jvp = grad if jvp is None else jvp
        COPS[name] = self


COPS = {}


def np_c(t):
    """A reference tensor as numpy (complex128 for complex, float64 for floats)."""
    t = t.detach()
    return t.numpy() if t.is_complex() or t.dtype == torch.bool else t.to(torch.float64).numpy()


def cgen_unary(name):
    def gen(g, big):
        if name in ("real", "imag", "conjugate") and g.r.random() < 0.2:  # a real array: itself / zeros
            return [make_input(g, g.r.choice(FLOATS), cshape(g))], {}
        return [cinput(g, cshape(g), inf_nan=name in C_INF_NAN_OK)], {}
    return gen


def cref_unary(name):
    def ref(ts, dts, p):
        z, dt = ts[0], dts[0]
        if dt != CDT:  # real / imag / conjugate of a real array (MLX): itself, zeros, itself
            return [(torch.zeros_like(z) if name == "imag" else z.clone(), dt)]
        if name in C_REFUSED_UNARY:
            raise TypeError("%s is not defined for complex64 (Loom, as MLX)" % name)
        if name in CUNARY:
            t = CUNARY[name](z)
            np_fn = getattr(np, name, None)
            if name in ("negative", "square", "log1p") or np_fn is None:
                return [(t, CDT)]
            # numpy's values (C99 branch cuts: the sign of a zero part picks the side, which torch's atan
            # ignores), torch's derivatives.
            with np.errstate(all="ignore"):
                v = torch.from_numpy(np.asarray(np_fn(np_c(z)), dtype=np.complex128))
            td = t.detach()
            nf = ~(torch.isfinite(td.real) & torch.isfinite(td.imag))
            return [(torch.where(nf, v, _Valued.apply(t, v)), CDT)]
        if name == "sign":  # z / |z|, 0 at 0 (numpy 2, MLX); NaN parts propagate
            return [(torch.sgn(z), CDT)]
        if name == "conjugate":
            return [(torch.conj_physical(z), CDT)]
        if name in ("copy", "stop_gradient"):
            return [(z.clone() if name == "copy" else z.detach().clone(), CDT)]
        if name == "abs":  # |inf + nan j| is inf (C99 hypot, numpy); torch's is NaN
            a = torch.abs(z)
            return [(torch.where(torch.isfinite(z), a, torch.from_numpy(np.asarray(np.abs(np_c(z))))), "float32")]
        if name in ("real", "imag"):
            return [({"real": torch.real, "imag": torch.imag}[name](z), "float32")]
        if name == "round":  # each part, half to even (numpy)
            return [(torch.from_numpy(np.asarray(np.round(np_c(z)))), CDT)]
        if name == "logical_not":
            return [(z == 0, "bool")]
        return [({"isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite}[name](z), "bool")]
    return ref


def finite_or_zero(c):
    return torch.where(torch.isfinite(c), c, torch.zeros_like(c))


def cscale_unary(name):
    """|z f'(z)|: how far rounding z by one unit moves f(z) (ill-conditioned near branch points and
    for large arguments of sin, cosh, ..., whichever way f is evaluated)."""
    f = CUNARY[name]

    def scale(ts, dts, p):
        if dts[0] != CDT:
            return None
        with torch.enable_grad():
            z = ts[0].detach().clone().requires_grad_(True)
            y = f(z)
            d, = torch.autograd.grad(y, z, torch.ones_like(y))
        c = z.detach().abs() * d.abs()
        if name == "log1p":  # accurate near 0 (numpy's log(1 + z) is not: the reference is _clog1p)
            deviation("complex_log1p")
        return finite_or_zero(c)
    return scale


def cgen_binary(name):
    def gen(g, big):
        shape = cshape(g)
        sa, sb = shape, g.broadcastable(shape)
        ok = name in C_INF_NAN_OK
        kw = dict(inf_nan=ok, special=name != "power")
        a = cinput(g, sa, **kw)
        if g.r.random() < 0.75:
            b = cinput(g, sb, **kw)
        else:  # a real operand: promoted to complex64 (power: no zero base, whose derivative is a convention)
            b = make_input(g, g.r.choice(DTYPES if name != "power" else FLOATS), sb, special=ok and name != "power")
        if g.r.random() < 0.5:
            a, b = b, a
        return [a, b], {}
    return gen


def lex_pick(a, b, name):
    """numpy's maximum / minimum of complex128 arrays (lexicographic, a NaN operand wins, the first
    one when both are NaN), as masks: which elements come from a, from b, and ties (both)."""
    fn = np.maximum if name == "maximum" else np.minimum
    with np.errstate(all="ignore"):
        m = np.asarray(fn(a, b))

    def same(x):
        x = np.broadcast_to(x, m.shape)
        return (((x.real == m.real) | (np.isnan(x.real) & np.isnan(m.real))) &
                ((x.imag == m.imag) | (np.isnan(x.imag) & np.isnan(m.imag))))
    pa, pb = np.asarray(same(a)), np.asarray(same(b))
    return np.asarray(pa & ~pb), np.asarray(~pa), np.asarray(pa & pb)


def cref_binary(name):
    def ref(ts, dts, p):
        if name in C_REFUSED_BINARY:
            raise TypeError("%s is not defined for complex64 (Loom, as MLX)" % name)
        a, b = ccast(ts[0], dts[0]), ccast(ts[1], dts[1])
        if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
            with np.errstate(all="ignore"):
                return [(torch.from_numpy(np.asarray(getattr(np, name)(np_c(a), np_c(b)))), "bool")]
        if name in ("maximum", "minimum"):
            only_a, from_b, tie = lex_pick(np_c(a), np_c(b), name)
            shape = torch.broadcast_shapes(a.shape, b.shape)
            a, b = a.expand(shape), b.expand(shape)
            # At a tie the second input gets the cotangent (Loom's and MLX's rule for maximum / minimum).
            return [(torch.where(torch.from_numpy(np.asarray(from_b | tie)), b, a), CDT)]
        if name == "divide":  # by zero: numpy's (a.real / |0|, a.imag / |0|), an infinity (torch: NaN)
            deviation("complex_divide_by_zero")
            a, b = torch.broadcast_tensors(a, b)
            zero = b == 0
            inf = torch.complex(a.real.detach() / 0.0, a.imag.detach() / 0.0)
            return [(torch.where(zero, inf, a / torch.where(zero, torch.ones_like(b), b)), CDT)]
        if name in ("add", "subtract"):  # by parts: torch's add of a 0-d operand multiplies by alpha = 1 + 0j,
            sg = 1 if name == "add" else -1  # and inf * 0 makes a NaN
            return [(torch.complex(a.real + sg * b.real, a.imag + sg * b.imag), CDT)]
        if name == "logaddexp":  # MLX's: hi + log1p(exp(lo - hi)), hi the larger in lexicographic order
            a, b = torch.broadcast_tensors(a, b)
            _, from_b, tie = lex_pick(np_c(a), np_c(b), "maximum")
            hi_is_b = torch.from_numpy(np.asarray(from_b | tie))
            hi, lo = torch.where(hi_is_b, b, a), torch.where(hi_is_b, a, b)
            return [(hi + _clog1p(torch.exp(lo - hi)), CDT)]
        fn = {"multiply": torch.mul, "power": torch.pow}[name]
        return [(fn(a, b), CDT)]
    return ref


def cscale_binary(name):
    def scale(ts, dts, p):
        a, b = ccast(ts[0], dts[0]).abs(), ccast(ts[1], dts[1]).abs()
        if name in ("add", "subtract", "logaddexp"):  # logaddexp: hi plus a term of modulus <= log 2
            return finite_or_zero(a + b)
        if name == "multiply":
            return finite_or_zero(a * b)
        if name == "divide":
            return finite_or_zero(a / b)
        if name == "power":  # d(a^b) = a^b (b da / a + log(a) db)
            za, zb = ccast(ts[0], dts[0]), ccast(ts[1], dts[1])
            return finite_or_zero(torch.pow(za, zb).abs() * (zb.abs() + (torch.log(za) * zb).abs()))
        return None
    return scale


def cgen_where(g, big):
    shape = cshape(g)
    shapes = [shape, g.broadcastable(shape), g.broadcastable(shape)]
    g.r.shuffle(shapes)
    x = cinput(g, shapes[1])
    y = cinput(g, shapes[2]) if g.r.random() < 0.7 else make_input(g, g.r.choice(FLOATS + INTS), shapes[2])
    ins = [x, y]
    g.r.shuffle(ins)
    cond = cinput(g, shapes[0]) if g.r.random() < 0.15 else make_input(g, "bool", shapes[0])
    return [cond] + ins, {}


def cref_where(ts, dts, p):
    c = ts[0] != 0 if dts[0] != "bool" else ts[0]
    return [(torch.where(c, ccast(ts[1], dts[1]), ccast(ts[2], dts[2])), CDT)]


def cgen_clip(g, big):
    shape = cshape(g)
    lo, hi = g.r.random() < 0.8, g.r.random() < 0.8
    if not lo and not hi:
        lo = True
    ins = [cinput(g, shape)]
    ins += [cinput(g, g.broadcastable(shape), special=g.r.random() < 0.3) for present in (lo, hi) if present]
    return ins, {"lo": lo, "hi": hi}


def cref_clip(ts, dts, p):
    out, i = ts[0], 1  # maximum with lo, then minimum with hi (numpy's clip; lo > hi gives hi)
    for key, name in (("lo", "maximum"), ("hi", "minimum")):
        if p[key]:
            out = cref_binary(name)([out, ts[i]], [CDT, CDT], {})[0][0]
            i += 1
    return [(out, CDT)]


def cgen_astype(g, big):
    shape = cshape(g)
    if g.r.random() < 0.6:
        return [cinput(g, shape)], {"dtype": g.r.choice(DTYPES + [CDT])}
    return [make_input(g, g.r.choice(DTYPES), shape)], {"dtype": CDT}


def cref_astype(ts, dts, p):
    z, src, to = ts[0], dts[0], p["dtype"]
    if to == CDT:
        return [(ccast(z, src), CDT)]
    if to == "bool":  # both parts are tested
        return [(z != 0, "bool")]
    if to in FLOATS:  # the real part
        return [(rt(z.real, to), to)]
    return [(float_to_int(z.real, to), to)]


def cgen_reduce(name):
    def gen(g, big):
        shape = cshape(g)
        lo = hi = None
        if name == "prod":
            lo, hi = -1.4, 1.4
        p = {"axes": gen_axes(g, len(shape)), "keepdims": g.r.random() < 0.3}
        if name in ("var", "std"):
            p["ddof"] = g.r.choice([0, 0, 1, 2])
        return [cinput(g, shape, inf_nan=name in C_INF_NAN_OK, lo=lo, hi=hi)], p
    return gen


def lex_arg(x, axis, name):
    """numpy's argmax / argmin of complex128 x along axis (the first NaN when there is one)."""
    return (np.argmax if name in ("max", "argmax") else np.argmin)(x, axis=axis)


def select_reduce(z, axes, keep, name):
    """max / min of z over axes as numpy (lexicographic, NaN propagates), as a differentiable sum of
    the tied maxima divided by their count (a tie shares the cotangent, as the float references)."""
    x = np_c(z)
    if x.size == 0:  # nothing to pick from, but a non-empty reduced axis: an empty result
        return z.sum(dim=axes, keepdim=keep)
    moved = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
    flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    idx = lex_arg(flat, -1, name)
    m = np.take_along_axis(flat, idx[..., None], -1)[..., 0]
    mk = m.reshape(m.shape + (1,) * len(axes))
    mk = np.moveaxis(mk, list(range(x.ndim - len(axes), x.ndim)), axes)  # keepdims shape, broadcastable
    if np.isnan(m).any():  # NaN: no derivative is compared; the value is numpy's
        r = torch.from_numpy(mk.copy())
    else:
        mask = torch.from_numpy(np.broadcast_to(x == mk, x.shape).copy())
        cnt = mask.sum(dim=axes, keepdim=True)
        s = torch.where(mask, z, torch.zeros_like(z)).sum(dim=axes, keepdim=True)
        r = torch.complex(s.real / cnt, s.imag / cnt)  # not s / cnt: a complex division, (0+inf j) / 1 is NaN
    if not keep:
        for a in sorted(axes, reverse=True):
            r = r.squeeze(a)
    return r


def cref_reduce(name):
    def ref(ts, dts, p):
        z = ts[0]
        axes = norm_axes(p["axes"], z.dim())
        keep = p.get("keepdims", False)
        if name in ("logsumexp",):
            raise TypeError("logsumexp is not defined for complex64")
        n = int(np.prod([z.shape[a] for a in axes], dtype=np.int64))
        if name in ("max", "min"):
            if n == 0 and axes:
                deviation("reduce_empty_identity")
                raise ValueError("empty")
            return [(select_reduce(z, axes, keep, name) if axes else z.clone(), CDT)]
        if name in ("all", "any", "count_nonzero"):
            b = (z != 0).to(torch.int64)
            if name == "count_nonzero":
                return [(b.sum(dim=axes, keepdim=keep) if axes else b, "int32")]
            r = b.sum(dim=axes, keepdim=keep) if axes else b
            return [((r == n) if name == "all" else (r > 0), "bool")]
        if name == "sum":
            return [(z.sum(dim=axes, keepdim=keep) if axes else z.clone(), CDT)]
        if name == "prod":
            r = z
            for a in sorted(axes, reverse=True):
                r = torch.prod(r, dim=a, keepdim=keep)
            return [(r if axes else z.clone(), CDT)]
        if name == "mean":
            if not axes:
                return [(z.clone(), CDT)]
            deviation("mean_of_empty")
            s = z.sum(dim=axes, keepdim=keep)
            return [(s / n if n else s * math.nan, CDT)]
        if name in ("var", "std"):  # numpy: the mean of |z - mean|^2, a float32
            ddof = p.get("ddof", 0)
            m = (z.sum(dim=axes, keepdim=True) / n if n else z * math.nan) if axes else z
            d = z - m
            sq = d.real * d.real + d.imag * d.imag
            s = sq.sum(dim=axes, keepdim=keep) if axes else sq
            if n - ddof <= 0:
                deviation("ddof_too_large")
                v = s * math.nan
            else:
                v = s / (n - ddof)
            return [(torch.sqrt(v) if name == "std" else v, "float32")]
        if name == "median":  # numpy: the middle of the lexicographic sort, the mean of two middles
            if n == 0 and axes:
                deviation("median_empty")
                raise ValueError("empty")
            if not axes:
                return [(z.clone(), CDT)]
            x = np_c(z)
            if x.size == 0:
                return [(z.sum(dim=axes, keepdim=keep), CDT)]
            moved = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
            flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
            s = np.take_along_axis(flat, lex_argsort(flat, -1), -1)
            r = (s[..., (n - 1) // 2] + s[..., n // 2]) / 2
            if keep:
                r = r.reshape(r.shape + (1,) * len(axes))
                r = np.moveaxis(r, list(range(x.ndim - len(axes), x.ndim)), axes)
            return [(torch.from_numpy(np.asarray(r)), CDT)]
        raise AssertionError(name)
    return ref


def cscale_reduce(name):
    def scale(ts, dts, p):
        z = ts[0]
        axes = norm_axes(p["axes"], z.dim())
        if not axes or name not in ("sum", "prod", "mean", "var", "std"):
            return None
        a = z.abs()
        n = max(1, int(np.prod([z.shape[x] for x in axes], dtype=np.int64)))
        if name == "sum":
            return finite_or_zero(a.sum(dim=axes, keepdim=p.get("keepdims", False)))
        if name == "mean":
            return finite_or_zero(a.sum(dim=axes, keepdim=p.get("keepdims", False)) / n)
        if name == "prod":
            r = a
            for x in sorted(axes, reverse=True):
                r = torch.prod(r, dim=x, keepdim=p.get("keepdims", False))
            return finite_or_zero(r)
        s = (a * a).sum(dim=axes, keepdim=p.get("keepdims", False)) / max(1, n - p.get("ddof", 0))
        return finite_or_zero(torch.sqrt(s) if name == "std" else s)
    return scale


def cgen_arg(g, big):
    shape = cshape(g)
    axis = None if not shape or g.r.random() < 0.3 else g.r.randrange(-len(shape), len(shape))
    return [cinput(g, shape)], {"axis": axis, "keepdims": g.r.random() < 0.3}


def cref_arg(name):
    def ref(ts, dts, p):
        x = np_c(ts[0])
        deviation("argmax_dtype")
        ax = p["axis"]
        if (x.size == 0 and ax is None) or (ax is not None and x.shape[ax] == 0):
            raise ValueError("empty")
        r = np.asarray(lex_arg(x.reshape(-1) if ax is None else x, None if ax is None else ax, name))
        if p["keepdims"]:
            r = r.reshape([1] * x.ndim) if ax is None else np.expand_dims(r, ax)
        return [(torch.from_numpy(r.astype(np.int32)), "int32")]
    return ref


def cgen_scan(name):
    def gen(g, big):
        shape = cshape(g, min_rank=1)
        lo, hi = (-1.4, 1.4) if name == "cumprod" else (None, None)
        return [cinput(g, shape, inf_nan=name in C_INF_NAN_OK, lo=lo, hi=hi)], {
            "axis": g.r.randrange(-len(shape), len(shape)), "reverse": g.r.random() < 0.4,
            "inclusive": g.r.random() < 0.7}
    return gen


def cref_scan(name):
    def ref(ts, dts, p):
        z = ts[0]
        if name == "logcumsumexp":
            raise TypeError("logcumsumexp is not defined for complex64")
        ax = p["axis"] % z.dim()
        x = torch.flip(z, [ax]) if p["reverse"] else z
        n = x.shape[ax]
        if name in ("cumsum", "cumprod"):
            r = (torch.cumsum if name == "cumsum" else torch.cumprod)(x, dim=ax)
            ident = 0.0 if name == "cumsum" else 1.0
        else:  # numpy's running maximum / minimum, as a selection of the elements it picked
            v = np_c(x)
            fn = np.maximum if name == "cummax" else np.minimum
            with np.errstate(all="ignore"):
                acc = fn.accumulate(v, axis=ax) if n else v
            # The index each running value came from: the latest position holding it (ties: any,
            # equal values; the derivative is compared only without ties, below).
            pos = np.zeros(v.shape, dtype=np.int64)
            if n:
                idx = np.zeros(np.take(v, 0, axis=ax).shape, dtype=np.int64)
                for k in range(n):
                    vk, ak = np.take(v, k, axis=ax), np.take(acc, k, axis=ax)
                    same = ((vk.real == ak.real) | (np.isnan(vk.real) & np.isnan(ak.real))) & (
                        (vk.imag == ak.imag) | (np.isnan(vk.imag) & np.isnan(ak.imag)))
                    idx = np.where(same, k, idx)
                    sl = [slice(None)] * v.ndim
                    sl[ax] = k
                    pos[tuple(sl)] = idx
            r = torch.gather(x, ax, torch.from_numpy(pos)) if n else x.clone()
            ident = complex(-math.inf, -math.inf) if name == "cummax" else complex(math.inf, math.inf)
        if not p["inclusive"]:
            first = torch.full_like(x.narrow(ax, 0, min(1, n)), ident)
            r = torch.cat([first, r.narrow(ax, 0, max(n - 1, 0))], dim=ax)
        return [(torch.flip(r, [ax]) if p["reverse"] else r, CDT)]
    return ref


def cscale_scan(name):
    def scale(ts, dts, p):
        if name not in ("cumsum", "cumprod"):
            return None
        a = ts[0].abs()
        ax = p["axis"] % a.dim()
        x = torch.flip(a, [ax]) if p["reverse"] else a
        r = (torch.cumsum if name == "cumsum" else torch.cumprod)(x, dim=ax)
        if not p["inclusive"]:  # the exclusive scan's values are the inclusive ones moved by one
            r = torch.cat([torch.ones_like(x.narrow(ax, 0, min(1, x.shape[ax]))), r.narrow(ax, 0, max(x.shape[ax] - 1, 0))], dim=ax)
        return finite_or_zero(torch.flip(r, [ax]) if p["reverse"] else r)
    return scale


def lex_argsort(x, axis):
    """numpy's lexicographic stable argsort of complex128 x along axis, values with a NaN part last
    in their original order (Loom's rule, docs/coming-from-mlx.md; numpy orders NaN kinds)."""
    x = np.moveaxis(x, axis, -1)
    nan = np.isnan(x.real) | np.isnan(x.imag)
    re, im = np.where(nan, 0.0, x.real), np.where(nan, 0.0, x.imag)
    order = np.lexsort((im, re, nan), axis=-1)
    return np.moveaxis(order, -1, axis)


def cgen_sort(name):
    def gen(g, big):
        shape = cshape(g, min_rank=1)
        axis = g.r.randrange(-len(shape), len(shape))
        p = {"axis": axis}
        if name == "topk":
            p["k"] = g.r.randint(0, shape[axis])
        return [cinput(g, shape)], p
    return gen


def cref_sort(name):
    def ref(ts, dts, p):
        z = ts[0]
        ax = p["axis"] % z.dim()
        order = torch.from_numpy(lex_argsort(np_c(z), ax).copy())
        if name == "argsort":
            deviation("argmax_dtype")
            return [(order.to(torch.int32), "int32")]
        s = torch.gather(z, ax, order)
        if name == "topk":
            deviation("topk_order")
            n = z.shape[ax]
            s = s.narrow(ax, n - p["k"], p["k"])
        return [(s, CDT)]
    return ref


def cgen_matmul(g, big):
    ins, p = OPS["matmul"].gen(g, big)
    out = []
    for i in ins:
        if g.r.random() < 0.85:
            out.append(Input(CDT, i.shape, cvalues(g, len(i.values), special=g.r.random() < 0.2, inf_nan=False),
                             i.recipe, i.base_shape))
        else:  # a real operand: promoted
            out.append(i)
    return out, p


def cref_matmul(ts, dts, p):
    return [(torch.matmul(ccast(ts[0], dts[0]), ccast(ts[1], dts[1])), CDT)]


def cscale_matmul(ts, dts, p):
    return finite_or_zero(torch.matmul(ccast(ts[0], dts[0]).abs(), ccast(ts[1], dts[1]).abs()))


# Real-linear ops that move, select or add values: which inputs hold the values (the others are
# indices, masks or conditions); the reference is the ordinary one on the real and imaginary parts.
CLINEAR = {n: [0] for n in ["reshape", "transpose", "flatten", "swapaxes", "moveaxis", "squeeze", "expand_dims",
                            "broadcast_to", "slice", "tile", "repeat", "split", "take", "take_along_axis", "gather",
                            "as_strided", "full", "copy", "contiguous"]}
CLINEAR.update({"slice_update": [0, 1], "pad": [0, 1], "put_along_axis": [0, 2], "masked_scatter": [0, 2],
                "scatter": [0, -1], "scatter_add": [0, -1], "slice_update_add": [0, 1], "scatter_add_axis": [0, 2],
                "scatter_add_take": [0, 2], "concatenate": None, "stack": None})


def cgen_linear(name):
    def gen(g, big):
        ins, p = OPS[name].gen(g, False)
        pos = CLINEAR[name] if CLINEAR[name] is not None else range(len(ins))
        for k in pos:
            i = ins[k]
            ins[k] = Input(CDT, i.shape, cvalues(g, len(i.values)), i.recipe, i.base_shape)
        return ins, p
    return gen


def cref_linear(name):
    def ref(ts, dts, p):
        parts = []
        for part in (torch.real, torch.imag):
            xs = [part(t) if d == CDT else t for t, d in zip(ts, dts)]
            parts.append(OPS[name].ref(xs, ["float32" if d == CDT else d for d in dts], p))
        out = []
        for (re, d), (im, _) in zip(*parts):
            out.append((torch.complex(re, im), CDT) if d == "float32" else (re, d))
        return out
    return ref


def cscale_linear(name):
    def scale(ts, dts, p):
        if OPS[name].scale is None:
            return None
        m = OPS[name].scale([t.abs() if d == CDT else t for t, d in zip(ts, dts)],
                            ["float32" if d == CDT else d for d in dts], p)
        return None if m is None else finite_or_zero(m)
    return scale


# Chains of complex elementwise ops (sizes of 256 and more go through elementwise fusion).
CCHAIN_UNARY = ["negative", "square", "exp", "sin", "cos", "tanh", "sqrt", "conjugate", "reciprocal", "log"]
CCHAIN_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


def cgen_chain(g, big):
    shape = g.shape() if g.r.random() < 0.5 else [g.r.choice([256, 300, 1000, 4097])]
    k = g.r.randint(1, 3)
    ins = [cinput(g, shape if i == 0 else g.broadcastable(shape), special=g.r.random() < 0.3, inf_nan=False,
                  lo=-1.5, hi=1.5) for i in range(k)]
    steps, nreg = chain_steps(g, k, 0.5, CCHAIN_UNARY, CCHAIN_BINARY)
    steps[-1] = steps[-1][:1] + [nreg - 2 if nreg - 2 >= k else 0] + steps[-1][2:]
    return ins, {"steps": steps}


def crun_chain(ts, dts, steps, perturb=None):
    """The chain's registers, each step rounded to its dtype; perturb = (register, factor) multiplies
    that register (an input or a step's result) by the factor first."""
    regs = []
    for n, (t, d) in enumerate(zip(ts, dts)):
        regs.append((t * perturb[1] if perturb and perturb[0] == n and d == CDT else t, d))
    for step in steps:
        args = [regs[i] for i in step[1:]]
        cop = COPS[step[0]]
        (t, d), = cop.ref([a[0] for a in args], [a[1] for a in args], {})
        t = crt(t) if d == CDT else t
        if perturb and perturb[0] == len(regs):
            t = t * perturb[1]
        regs.append((t, d))
    return regs


def cref_chain(ts, dts, p):
    return [crun_chain(ts, dts, p["steps"])[-1]]


def cscale_chain(ts, dts, p):
    # Each register's error carried through the rest of the chain: the change of the result when the
    # register moves by a small relative step (along the real and the imaginary direction), in units
    # of that step; a singularity downstream gives an unbounded change (+inf: any value agrees).
    regs = crun_chain(ts, dts, p["steps"])
    out = regs[-1][0]
    eps = 1e-7
    cond = torch.zeros(out.shape, dtype=torch.float64)
    # Where a step's value is not finite (a reciprocal of 0), the rest of the chain meets C99's special
    # cases, where torch and std::complex differ (complex_divide_by_zero): any value agrees there.
    for t, d in regs[len(ts):]:
        nf = ~(torch.isfinite(t.real) & torch.isfinite(t.imag)) if t.is_complex() else ~torch.isfinite(t)
        cond = torch.where(nf.expand(out.shape), torch.full_like(cond, math.inf), cond) if nf.any() else cond
    for n in range(len(ts) + len(p["steps"])):
        for f in (1 + eps, complex(1, eps)):
            o = crun_chain(ts, dts, p["steps"], (n, f))[-1][0]
            diff = (o - out).abs() / eps
            bad = torch.isnan(o) != torch.isnan(out)
            if o.is_complex():
                bad = (torch.isnan(o.real) | torch.isnan(o.imag)) != (torch.isnan(out.real) | torch.isnan(out.imag))
            diff = torch.where(bad, torch.full_like(diff, math.inf), torch.nan_to_num(diff, nan=0.0))
            cond = cond + diff
    return cond


def crounded(outs):
    return [(crt(t) if d == CDT else rt(t, d) if d in FLOATS else t, d) for t, d in outs]


for _n in list(CUNARY) + ["sign", "conjugate", "abs", "real", "imag", "round", "isnan", "isinf", "isfinite",
                          "logical_not", "stop_gradient"] + C_REFUSED_UNARY:
    COp(_n, cgen_unary(_n), cref_unary(_n), grad=_n not in ("round", "isnan", "isinf", "isfinite", "logical_not",
                                                            "stop_gradient") and _n not in C_REFUSED_UNARY,
        scale=cscale_unary(_n) if _n in CUNARY and _n not in ("negative",) else None)
for _n in ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "logaddexp", "equal", "not_equal",
           "less", "less_equal", "greater", "greater_equal"] + C_REFUSED_BINARY:
    COp(_n, cgen_binary(_n), cref_binary(_n), grad=_n in ("add", "subtract", "multiply", "divide", "power", "maximum",
                                                         "minimum", "logaddexp"), scale=cscale_binary(_n))
COp("where", cgen_where, cref_where)
COp("clip", cgen_clip, cref_clip)
COp("astype", cgen_astype, cref_astype)
for _n in ["sum", "prod", "mean", "var", "std", "max", "min", "all", "any", "count_nonzero", "median", "logsumexp"]:
    # std: no derivative where a group's spread is 0 (known_differences std_at_zero), so none compared.
    COp(_n, cgen_reduce(_n), cref_reduce(_n), grad=_n in ("sum", "prod", "mean", "var", "max", "min"),
        scale=cscale_reduce(_n))
for _n in ["argmax", "argmin"]:
    COp(_n, cgen_arg, cref_arg(_n), grad=False)
for _n in ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"]:
    COp(_n, cgen_scan(_n), cref_scan(_n), grad=_n != "logcumsumexp", scale=cscale_scan(_n))
for _n in ["sort", "argsort", "topk"]:
    COp(_n, cgen_sort(_n), cref_sort(_n), grad=_n != "argsort")
COp("matmul", cgen_matmul, cref_matmul, scale=cscale_matmul)
for _n in CLINEAR:
    COp(_n, cgen_linear(_n), cref_linear(_n), grad=OPS[_n].grad, jvp=OPS[_n].jvp, scale=cscale_linear(_n))
COp("chain", cgen_chain, cref_chain, scale=cscale_chain)


# fft (ops/fft.h): every kind, over one axis, two or any, with lengths n (cropping or zero padding),
# norms, views; lengths that take each radix, the generic odd radix and Bluestein. The reference is
# torch.fft in complex128 (float64 for rfft) on the inputs Loom transforms (complex64 / float32), so
# the error is Loom's float32 arithmetic alone. Its scale: every output is bounded by the same
# transform of |x| at frequency 0 (sum |x| times the norm, for irfft the Hermitian sum), per line.
FFT_KINDS = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"]
FFT_LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 25, 31, 37]
FFT_LONG = [64, 97, 100, 128, 360, 1000, 1021]


def fft_axes(p, ndim):
    """The transformed axes of a case (non-negative), in order."""
    kind = p["kind"]
    if "axes" in p:
        axes = p["axes"]
    elif kind[-1] == "2":
        axes = [-2, -1]
    elif kind[-1] == "n":
        axes = list(range(ndim))
    else:
        axes = [-1]
    return [a % ndim for a in axes]


def cgen_fft(g, big):
    kind = g.r.choice(FFT_KINDS)
    rank = g.r.choice([1, 1, 2, 2, 3]) if kind[-1] not in "2n" else g.r.choice([2, 2, 3])
    shape = [g.r.choice(FFT_LENGTHS) for _ in range(rank)]
    if g.r.random() < 0.15:  # one long axis, the others short
        shape = [g.r.choice([1, 2, 3]) for _ in range(rank)]
        shape[g.r.randrange(rank)] = g.r.choice(FFT_LONG)
    p = {"kind": kind}
    if kind[-1] == "2" or (kind[-1] == "n" and g.r.random() < 0.7) or (kind[-1] not in "2n" and g.r.random() < 0.5):
        k = 1 if kind[-1] not in "2n" else 2 if kind[-1] == "2" else g.r.randint(1, rank)
        axes = g.r.sample(range(rank), k)
        p["axes"] = [a - rank if g.r.random() < 0.5 else a for a in axes]
    axes = fft_axes(p, rank)
    real_out = kind.startswith("irfft")
    if g.r.random() < 0.4:  # lengths: crop, pad, or (irfft) any output length
        p["n"] = [max(1, shape[a] + g.r.choice([-2, -1, 1, 2, 3, shape[a]])) for a in axes]
    elif real_out and shape[axes[-1]] < 2:
        shape[axes[-1]] = 2  # irfft's default length 2 (m - 1) must be positive
    if g.r.random() < 0.6:
        p["norm"] = g.r.choice(["backward", "ortho", "forward"])
    if kind.startswith("rfft"):
        x = make_input(g, g.r.choice(["float32", "float32", "float64", "float16"]), shape, special=False)
    else:
        x = cinput(g, shape, inf_nan=False, special=g.r.random() < 0.3)
    return [x], p


def fft_torch(x, p, ndim):
    kind, norm = p["kind"], p.get("norm", "backward")
    axes = fft_axes(p, ndim)
    fn = getattr(torch.fft, kind)
    if kind[-1] not in "2n":
        return fn(x, n=p["n"][0] if "n" in p else None, dim=axes[0], norm=norm)
    return fn(x, s=p.get("n"), dim=axes, norm=norm)


def cref_fft(ts, dts, p):
    x, d = ts[0], dts[0]
    # Loom transforms complex64 (rfft: float32) values, whatever the input's dtype.
    x = cast(x, d, "float32").to(torch.float64) if p["kind"].startswith("rfft") else ccast(x, d)
    y = fft_torch(x, p, x.dim())
    return [(y, "float32" if p["kind"].startswith("irfft") else CDT)]


def cscale_fft(ts, dts, p):
    x, d = ts[0], dts[0]
    a = (cast(x, d, "float32").to(torch.float64) if d != CDT else x).abs()
    if not p["kind"].startswith("rfft"):
        a = torch.complex(a, torch.zeros_like(a))
    y = fft_torch(a, p, a.dim()).abs()
    return finite_or_zero(torch.amax(y, dim=fft_axes(p, a.dim()), keepdim=True).expand(y.shape))


COp("fft", cgen_fft, cref_fft, scale=cscale_fft)


# fft covers twelve functions and four primitives: drawn as often as a dozen complex ops together.
CWEIGHTS = {"fft": 12}


def make_complex_case(g, cid, op_name=None):
    names = sorted(COPS)
    name = op_name or g.r.choices(names, [CWEIGHTS.get(n, 1) for n in names])[0]
    op = COPS[name]
    inputs, params = op.gen(g, False)
    case = {"id": cid, "op": name, "_inputs": inputs, "params": params}
    if op.grad and g.r.random() < 0.5:
        outs = cdifferentiable_outputs(case, op)
        if outs:
            case["vjp"] = [{"dtype": d, "shape": list(t.shape), "data": enc_values(crandn(g.np, t.numel(), d), d)}
                           for t, d in outs]
    side = np.random.default_rng([g.seed, cid, 2])
    if op.jvp and side.random() < JVP_FRACTION and cdifferentiable_outputs(case, op):
        case["jvp"] = [{"dtype": i.dt, "shape": list(i.base_shape), "data": enc_values(crandn(side, len(i.values), i.dt), i.dt)}
                       if i.dt in FLOATS or i.dt == CDT else None for i in inputs]
    return case


def crandn(rng, n, d):
    if d == CDT:
        z = np.empty(n, dtype=np.complex128)
        z.real, z.imag = round_to(rng.standard_normal(n), "float32"), round_to(rng.standard_normal(n), "float32")
        return z
    return round_to(rng.standard_normal(n), d)


def cfinite(t):
    t = t.detach()
    return bool(torch.isfinite(t.real).all() and torch.isfinite(t.imag).all()) if t.is_complex() else bool(
        torch.isfinite(t).all())


# Orderings whose derivative at equal values depends on which of them the op took (a stable sort's
# first, a scan's latest...): with repeated input values their derivatives are not compared.
C_TIE_AMBIGUOUS = {"sort", "topk", "cummax", "cummin"}


def cdifferentiable_outputs(case, op):
    """The rounded reference outputs when all are complex64 / floating and finite, and so are the
    inputs and the cotangent-carrying path; else None."""
    if case["op"] in C_TIE_AMBIGUOUS and any(
            i.dt == CDT and np.unique(np.asarray(i.values)).size < np.asarray(i.values).size for i in case["_inputs"]):
        return None
    try:
        _, ts, dts, outs = creference(case, op, False)
    except Exception:
        return None
    # As chain_finite for real chains: a step through an infinity (log of 0, a division by 0) leaves
    # the derivatives to conventions (0 * inf, C99's special cases) that are not what is checked.
    if case["op"] == "chain" and not all(cfinite(t) for t, _ in crun_chain(ts, dts, case["params"]["steps"])):
        return None
    if outs and all((d == CDT or d in FLOATS) and cfinite(t) for t, d in outs) and all(
            np.isfinite(np.asarray(i.values)).all() for i in case["_inputs"] if i.dt in FLOATS or i.dt == CDT):
        return outs
    return None


def cbase_tensor(inp, grad):
    if inp.dt == CDT:
        t = torch.tensor(np.asarray(inp.values, dtype=np.complex128).reshape(inp.base_shape))
        return t.requires_grad_(grad)
    return base_tensor(inp, grad)


def creference(case, op, with_grad, tangents=None):
    ins = case["_inputs"]
    bases = [cbase_tensor(i, with_grad and (i.dt in FLOATS or i.dt == CDT)) for i in ins]
    if tangents is not None:
        bases = [fwAD.make_dual(b, t) if t is not None else b for b, t in zip(bases, tangents)]
    ts = [viewed(b, i) for b, i in zip(bases, ins)]
    dts = [i.dt for i in ins]
    outs = crounded(op.ref(ts, dts, case.get("params", {})))
    return bases, ts, dts, outs


def cdecode(o, d):
    """A result's values as numpy: complex128 for complex64, else as dec_values."""
    return dec_values(o["data"], d)


def compare_complex(got, want, rtol, scale=None, singular_ok=False, any_infinity=False):
    """compare() for complex64: errors relative to |want| (plus the scale) in the complex plane; a
    value with a NaN part matches any value with a NaN part; infinite parts must match exactly."""
    got, want = np.asarray(got, dtype=np.complex128), np.asarray(want, dtype=np.complex128)
    if got.shape != want.shape:
        return "size %s, expected %s" % (got.shape, want.shape)
    tol = RTOL["float32"] * rtol
    sc = np.zeros(want.shape) if scale is None else np.broadcast_to(
        np.nan_to_num(np.asarray(scale, dtype=np.float64), nan=0.0, posinf=0.0), want.shape)
    unbounded = np.zeros(want.shape, bool) if scale is None else np.broadcast_to(
        np.isposinf(np.asarray(scale, dtype=np.float64)), want.shape)
    with np.errstate(all="ignore"):
        gn = np.isnan(got.real) | np.isnan(got.imag)
        wn = np.isnan(want.real) | np.isnan(want.imag)
        fin = np.isfinite(want) & np.isfinite(got)
        ok = (gn & wn) | (got == want) | (fin & (np.abs(got - want) <= tol * (np.abs(want) + sc) + 2 * TINY["float32"]))
        # Infinite parts exactly, the other part within the tolerance (a rounding at the top of the
        # range may give the largest finite value or an infinity).
        part_ok = np.ones(want.shape, bool)
        for gp, wp in ((got.real, want.real), (got.imag, want.imag)):
            near = np.abs(gp - wp) <= tol * (np.abs(wp) + sc) + 2 * TINY["float32"]
            top = (np.abs(gp) >= FMAX["float32"] * (1 - tol)) & (np.abs(wp) >= FMAX["float32"] * (1 - tol)) & (
                np.sign(gp) == np.sign(wp))
            part_ok &= (gp == wp) | (np.isfinite(gp) & np.isfinite(wp) & near) | top
        ok |= ~gn & ~wn & part_ok
        ok |= unbounded
        # At a singular point (arctan(+-i), arctanh(+-1)) the result's infinite part is determined and the
        # other is C99's (Loom, std::complex) or NaN (PyTorch): the infinite part must match.
        sing = (np.isinf(want.real) & np.isnan(want.imag) & (got.real == want.real)) | (
            np.isinf(want.imag) & np.isnan(want.real) & (got.imag == want.imag))
        ok |= sing & bool(deviation("complex_singular_values"))
        if any_infinity:  # complex division by zero: one infinity (complex_divide_by_zero)
            ok |= (np.isinf(want.real) | np.isinf(want.imag)) & (np.isinf(got.real) | np.isinf(got.imag))
        if singular_ok:  # a derivative at a singular point (arccos at 1): NaN or infinite either way
            ok |= ~np.isfinite(want) & ~np.isfinite(got)
    bad = np.nonzero(~ok.reshape(-1))[0]
    if bad.size:
        i = bad[0]
        return "at flat index %d: %r, expected %r (tolerance %.3g relative; %d of %d elements differ)" % (
            i, got.reshape(-1)[i], want.reshape(-1)[i], tol, bad.size, got.size)
    return None


def ccompare(got, want, d, rtol, scale=None, singular_ok=False):
    if d == CDT:
        return compare_complex(got, want, rtol, scale, singular_ok)
    if singular_ok:
        bad = ~np.isfinite(np.asarray(want, dtype=np.float64)) & ~np.isfinite(np.asarray(got, dtype=np.float64))
        got = np.where(bad, 0.0, np.asarray(got, dtype=np.float64))
        want = np.where(bad, 0.0, np.asarray(want, dtype=np.float64))
    return compare(got, want, d, rtol, scale)


def cto_np(t, d):
    return t.detach().numpy().reshape(-1) if d == CDT else to_np(t, d)


def check_complex(case, res):
    """check() for the complex family: values, vjps (torch.autograd) and jvps (forward mode)."""
    op = COPS[case["op"]]
    params = case.get("params", {})
    want_grad = "vjp" in case
    try:
        bases, ts, dts, outs = creference(case, op, want_grad)
    except Exception as e:  # the reference rejects the input
        if "error" in res:
            return []
        return ["reference rejects (%s: %s) but Loom returned %s" % (type(e).__name__, e, summarize(res))]
    if "error" in res:
        return ["Loom throws: %s" % res["error"]]
    scale = None
    if op.scale is not None:
        try:
            with torch.no_grad():
                m = op.scale([t.detach() for t in ts], dts, params)
            scale = None if m is None else m.detach().to(torch.float64).numpy()
        except Exception:
            scale = None
    problems = []
    for variant, r in [("", res)] + ([("[fusion off] ", res["nofuse"])] if "nofuse" in res else []):
        if "error" in r:
            problems.append(variant + "Loom throws: %s" % r["error"])
            continue
        if len(r["outputs"]) != len(outs):
            problems.append(variant + "%d outputs, expected %d" % (len(r["outputs"]), len(outs)))
            continue
        for k, ((t, d), o) in enumerate(zip(outs, r["outputs"])):
            name = variant + ("output %d" % k if len(outs) > 1 else "value")
            if o["dtype"] != d:
                problems.append("%s: dtype %s, expected %s" % (name, o["dtype"], d))
                continue
            if list(o["shape"]) != list(t.shape):
                problems.append("%s: shape %s, expected %s" % (name, o["shape"], list(t.shape)))
                continue
            sc = None if scale is None or k else scale.reshape(-1) if scale.size == t.numel() else scale
            if d == CDT:
                msg = compare_complex(cdecode(o, d), cto_np(t, d), 1.0, sc, any_infinity=case["op"] == "divide")
            else:
                msg = ccompare(cdecode(o, d), cto_np(t, d), d, 1.0, sc)
            if msg:
                problems.append("%s: %s" % (name, msg))
        if problems:
            continue
        if want_grad:
            problems += ccheck_vjp(case, bases, ts, outs, r, variant)
        if "jvp" in case:
            problems += ccheck_jvp(case, op, r, variant)
    return problems


def grad_tol(case, dt):
    """16x the float32 tolerance, or the input's (half types), or that of the least precise input."""
    worst = max([RTOL[i.dt] for i in case["_inputs"] if i.dt in FLOATS] + [RTOL["float32"]])
    return 16.0 * worst / RTOL["float32"]


def ccheck_vjp(case, bases, ts, outs, r, variant):
    if "vjp" not in r:
        return [variant + "no vjp in the result"]
    cots = [torch.tensor(dec_values(c["data"], c["dtype"]).reshape(c["shape"])) for c in case["vjp"]]
    leaves = [b for b in bases if b.requires_grad]
    if not leaves:
        return []
    terms = [t for t in ts if t.requires_grad and not t.is_leaf]
    live = [(t, c) for (t, d), c in zip(outs, cots) if t.requires_grad]  # imag of a real array: zeros
    grads = torch.autograd.grad([t for t, c in live], leaves + terms, [c for t, c in live], allow_unused=True,
                                retain_graph=True) if live else [None] * (len(leaves) + len(terms))
    sc_terms = max([term_scale([g.abs() if g is not None else None for g in grads[len(leaves):]])] +
                   [float(c.abs().max()) for c in cots if c.numel()])
    grads = iter(grads[:len(leaves)])
    problems = []
    for k, (inp, b) in enumerate(zip(case["_inputs"], bases)):
        if not b.requires_grad:
            continue
        gr = next(grads)
        want = (torch.zeros_like(b) if gr is None else gr).detach()
        want = crt(want) if inp.dt == CDT else rt(want, inp.dt)
        want = want.numpy().reshape(-1)
        got = r["vjp"][k]
        if got["dtype"] != inp.dt or list(got["shape"]) != inp.base_shape:
            problems.append("%svjp %d: %s %s, expected %s %s" % (variant, k, got["dtype"], got["shape"], inp.dt,
                                                                inp.base_shape))
            continue
        gv = dec_values(got["data"], inp.dt)
        if inp.dt in ("float16", "bfloat16"):
            gv, want = masked_grads(case, inp, gv, want)
        finite = np.abs(want[np.isfinite(want)])
        sc = max(finite.max() if finite.size else 0.0, sc_terms)
        msg = ccompare(gv, want, inp.dt, grad_tol(case, inp.dt) * (RTOL["float32"] / RTOL[inp.dt]
                                                                    if inp.dt in FLOATS else 1.0), sc, singular_ok=True)
        if msg:
            problems.append("%svjp of input %d: %s" % (variant, k, msg))
    return problems


def ccheck_jvp(case, op, r, variant):
    if "jvp" not in r:
        return [variant + "no jvp in the result"]
    tans = [None if j is None else torch.tensor(dec_values(j["data"], j["dtype"]).reshape(j["shape"]))
            for j in case["jvp"]]
    try:
        with fwAD.dual_level():
            bases, ts, dts, outs = creference(case, op, True, tans)
            want = []
            for t, d in outs:
                tan = fwAD.unpack_dual(t).tangent if (d == CDT or d in FLOATS) else None
                if tan is None and (d == CDT or d in FLOATS):
                    tan = torch.zeros_like(t)
                want.append((None if tan is None else tan.detach().clone(), d))
            terms = [fwAD.unpack_dual(x).tangent for x in ts if x.requires_grad and not x.is_leaf]
    except Exception as e:
        return ["reference jvp failed: %s: %s" % (type(e).__name__, e)]
    sc_terms = term_scale([None if x is None else x.abs() for x in terms] + [t.abs() for t in tans if t is not None])
    if len(r["jvp"]) != len(want):
        return ["%s%d jvp outputs, expected %d" % (variant, len(r["jvp"]), len(want))]
    problems = []
    for k, ((w, d), got) in enumerate(zip(want, r["jvp"])):
        if w is None:
            continue
        if got["dtype"] != d or list(got["shape"]) != list(w.shape):
            problems.append("%sjvp %d: %s %s, expected %s %s" % (variant, k, got["dtype"], got["shape"], d,
                                                                list(w.shape)))
            continue
        wv = (crt(w) if d == CDT else rt(w, d)).numpy().reshape(-1)
        finite = np.abs(wv[np.isfinite(wv)])
        sc = max(finite.max() if finite.size else 0.0, sc_terms)
        msg = ccompare(dec_values(got["data"], d), wv, d, grad_tol(case, d), sc, singular_ok=True)
        if msg:
            problems.append("%sjvp of output %d: %s" % (variant, k, msg))
    return problems


# ---- reference evaluation ----
def base_tensor(inp, grad):
    v = inp.values
    if inp.dt in FLOATS:
        t = torch.tensor(np.asarray(v, dtype=np.float64).reshape(inp.base_shape), dtype=torch.float64)
        t.requires_grad_(grad)
        return t
    if inp.dt == "bool":
        return torch.tensor(np.asarray(v, dtype=bool).reshape(inp.base_shape))
    return torch.tensor(np.asarray([int(x) for x in np.asarray(v).reshape(-1)], dtype=np.int64)
                        .reshape(inp.base_shape)).to(TORCH[inp.dt])


def index_tensor(idx):
    return torch.from_numpy(idx.flatten().copy()).reshape(idx.shape)  # flatten: no negative strides


def gather_view(t, base_shape, recipe):
    idx = index_tensor(view_index(base_shape, recipe))
    return t.reshape(-1)[idx.reshape(-1)].reshape(idx.shape)


def viewed(t, inp):
    return gather_view(t, inp.base_shape, inp.recipe) if inp.recipe else t


# Per-use copies of a chain's registers (ref_chain), whose gradients check_vjp takes as terms.
TERMS = []


def reference(case, op, with_grad):
    del TERMS[:]
    ins = case["_inputs"]
    bases = [base_tensor(i, with_grad) for i in ins]
    ts = [viewed(b, i) for b, i in zip(bases, ins)]
    dts = [i.dt for i in ins]
    outs = op.ref(ts, dts, case.get("params", {}))
    outs = [(rt(t, d) if d in FLOATS else t, d) for t, d in outs]
    return bases, ts, dts, outs


def to_np(t, d):
    t = t.detach()
    if d in FLOATS:
        return t.to(torch.float64).numpy().reshape(-1)
    if d == "bool":
        return t.numpy().astype(np.int64).reshape(-1)
    return t.to(torch.int64).numpy().reshape(-1)


def compare(got, want, dt, rtol, scale=None, nan_may_be_inf=False, bound=None, nan_may_be_finite=False):
    """None when `got` (decoded values) matches `want` (numpy), else a short reason. `scale`: the
    magnitudes errors are relative to besides |want| (+inf: the result is not determined by the
    inputs at working precision, anything agrees); `bound`: the largest magnitude an intermediate
    (a partial sum or product) can reach, for the overflow rule (the scale's when None)."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return "size %s, expected %s" % (got.shape, want.shape)
    if dt not in FLOATS:
        bad = np.nonzero(got.astype(object) != want.astype(object))[0]
        if bad.size:
            i = bad[0]
            return "at flat index %d: %s, expected %s (%d elements differ)" % (i, got[i], want[i], bad.size)
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    tol = RTOL[dt] * rtol
    sc = np.zeros_like(w) if scale is None else np.broadcast_to(np.nan_to_num(np.asarray(scale, dtype=np.float64),
                                                                              nan=0.0, posinf=0.0), w.shape)
    unbounded = np.zeros(w.shape, dtype=bool) if scale is None else np.broadcast_to(
        np.isposinf(np.asarray(scale, dtype=np.float64)), w.shape)
    if bound is None:
        bound = scale
    with np.errstate(all="ignore"):
        err = np.abs(g - w)
        ok = (gn & wn) | (g == w) | (~gn & ~wn & np.isfinite(w) & np.isfinite(g) &
                                     (err <= tol * (np.abs(w) + sc) + 2 * TINY[dt]))
        # A finite value at the top of the range and an infinity are the same value rounded twice.
        ok |= np.isinf(w) & np.isfinite(g) & (np.abs(g) >= FMAX[dt] * (1 - tol)) & (np.sign(g) == np.sign(w))
        ok |= np.isinf(g) & np.isfinite(w) & (np.abs(w) >= FMAX[dt] * (1 - tol)) & (np.sign(g) == np.sign(w))
        if nan_may_be_inf:
            ok |= wn & np.isinf(g)
        if nan_may_be_finite:
            ok |= wn & ~gn
        ok |= unbounded
        if bound is not None:  # partial sums (products) beyond the range: any order of overflow
            bd = np.asarray(bound, dtype=np.float64)
            bd = np.broadcast_to(np.where(np.isnan(bd), 0.0, bd), w.shape)  # +inf stays
            # Beyond the largest finite value by more than a rounding (float64: its bound is inf).
            over = bd > FMAX[dt] if dt == "float64" else bd >= FMAX[dt] * (1 + UNIT[dt])
            ok |= over & bool(deviation("overflow_in_accumulation"))
    bad = np.nonzero(~ok)[0]
    if bad.size:
        i = bad[0]
        return "at flat index %d: %r, expected %r (tolerance %.3g relative; %d of %d elements differ)" % (
            i, g[i], w[i], tol, bad.size, g.size)
    return None


def check(case, res):
    """Disagreements of one result with the reference: a list of strings (empty when they agree)."""
    # The runner's own vmap check (Loom against Loom: the op vmapped over a batch of perturbed
    # copies of the inputs, against a loop over them).
    vm = ["vmap: %s" % res["vmap"]] if "vmap" in res else []
    # And its compile check: the op (its vjp, its jvp) compiled against itself, bit for bit.
    cp = ["compile: %s" % res["compile"]] if "compile" in res else []
    return vm + cp + check_reference(case, res)


def check_reference(case, res):
    if complex_case(case):
        return check_complex(case, res)
    if unsigned_case(case):
        return check_unsigned(case, res)
    op = OPS[case["op"]]
    params = case.get("params", {})
    problems = []
    want_grad = "vjp" in case
    try:
        bases, ts, dts, outs = reference(case, op, want_grad or "jvp" in case)
    except Exception as e:  # the reference rejects the input
        if "error" in res:
            return []
        return ["reference rejects (%s: %s) but Loom returned %s" % (type(e).__name__, e, summarize(res))]
    if "error" in res:
        return ["Loom throws: %s" % res["error"]]
    for variant, r in [("", res)] + ([("[fusion off] ", res["nofuse"])] if "nofuse" in res else []):
        if "error" in r:
            problems.append(variant + "Loom throws: %s" % r["error"])
            continue
        if len(r["outputs"]) != len(outs):
            problems.append(variant + "%d outputs, expected %d" % (len(r["outputs"]), len(outs)))
            continue
        scale, bound = magnitudes(op.scale, ts, dts, params), magnitudes(op.bound, ts, dts, params)
        for k, ((t, d), o) in enumerate(zip(outs, r["outputs"])):
            name = variant + ("output %d" % k if len(outs) > 1 else "value")
            if o["dtype"] != d:
                problems.append("%s: dtype %s, expected %s" % (name, o["dtype"], d))
                continue
            if list(o["shape"]) != list(t.shape):
                problems.append("%s: shape %s, expected %s" % (name, o["shape"], list(t.shape)))
                continue
            got = dec_values(o["data"], d)
            if op.name in ("partition", "argpartition"):
                msg = check_partition(case, ts[0], dts[0], got, d)
            else:
                def flat(m):  # a scale of output 0, or a list of one per output
                    if isinstance(m, list):
                        m = m[k]
                    elif m is None or k:
                        return None
                    return m.reshape(-1) if m.size == t.numel() else m
                msg = compare(got, to_np(t, d), d, op.rtol, flat(scale), bound=flat(bound),
                              nan_may_be_inf=op.name in ("matmul", "conv_general") and deviation("blas_zero_times_inf"))
            if msg:
                problems.append("%s: %s" % (name, msg))
        if singular_derivative(case, ts, outs):
            continue
        if want_grad and not problems:
            problems += check_vjp(case, op, bases, ts, outs, r, variant)
        if "jvp" in case and not problems:
            problems += check_jvp(case, op, r, variant, amplification(op, ts, dts, params))
    return problems


def singular_derivative(case, ts, outs):
    """True where the derivative does not exist and conventions differ (known_differences:
    std_at_zero): std of a group whose spread is 0 up to rounding."""
    if case["op"] != "std" or ("vjp" not in case and "jvp" not in case):
        return False
    x = ts[0].detach()
    axes = norm_axes(case["params"]["axes"], x.dim())
    if x.numel() == 0:
        return False
    m = torch.amax(x.abs(), dim=axes, keepdim=case["params"].get("keepdims", False)) if axes else x.abs()
    sd = outs[0][0].detach()
    d = floating(case["_inputs"][0].dt)
    return bool((sd <= 16 * RTOL[d] * m).any()) and bool(deviation("std_at_zero"))


def reference_jvp(case, op):
    """The reference's tangents of the outputs for the case's input tangents, by PyTorch's forward
    mode through the same reference (rounded to each dtype as the values are), and the largest
    tangent of a gradient term (grad_terms). None when the reference is not differentiable (numpy)."""
    ins = case["_inputs"]
    tans = [None if j is None else torch.tensor(dec_values(j["data"], j["dtype"]).reshape(j["shape"]),
                                                dtype=torch.float64) for j in case["jvp"]]
    with fwAD.dual_level():
        del TERMS[:]
        bases = []
        for i, t in zip(ins, tans):
            b = base_tensor(i, i.dt in FLOATS)  # requiring grad: references take their torch paths
            bases.append(fwAD.make_dual(b, t) if t is not None and i.dt in FLOATS else b)
        ts = [viewed(b, i) for b, i in zip(bases, ins)]
        outs = op.ref(ts, [i.dt for i in ins], case.get("params", {}))
        want = []
        for t, d in outs:
            if d not in FLOATS:
                want.append((None, d))
                continue
            t = rt(t, d)
            tan = fwAD.unpack_dual(t).tangent
            if tan is None:
                if not t.requires_grad:
                    return None, 0.0  # computed outside torch: no derivative to compare with
                tan = torch.zeros_like(t)
            want.append((tan.detach().clone(), d))
        terms = [fwAD.unpack_dual(x).tangent for x in grad_terms(ts)] + [t for t in tans if t is not None]
        return want, term_scale(terms)


def amplification(op, ts, dts, params):
    """The op's error scale (its `scale`) relative to its inputs' magnitudes: a jvp is the op's
    linear part applied to the tangents with the op's own arithmetic, so its rounding error is the
    op's, scaled from the inputs' magnitudes to the tangents' (layer_norm of equal values divides
    dx - mean(dx), a cancellation, by sqrt(eps); a sum of n tangents errs as a sum of n values)."""
    vs = magnitudes(op.scale, ts, dts, params)
    xs = [t.detach().abs() for t, d in zip(ts, dts) if d in FLOATS and t.numel()]
    xs = [x[torch.isfinite(x)] for x in xs]
    xmax = max([float(x.max()) for x in xs if x.numel()] + [0.0])
    if vs is None or not xmax:
        return 0.0
    if isinstance(vs, list):  # one per output
        vs = np.concatenate([v.reshape(-1) for v in vs])
    vs = vs[np.isfinite(vs)]
    return float(vs.max()) / xmax if vs.size else 0.0


def check_jvp(case, op, r, variant, amp=0.0):
    if "jvp" not in r:
        return [variant + "no jvp in the result"]
    try:
        want, sc_terms = reference_jvp(case, op)
    except Exception as e:  # PyTorch has no forward mode for an op of the reference
        return ["reference jvp failed: %s: %s" % (type(e).__name__, e)]
    if want is None:
        return []
    if len(r["jvp"]) != len(want):
        return ["%s%d jvp outputs, expected %d" % (variant, len(r["jvp"]), len(want))]
    problems = []
    for k, ((w, d), got) in enumerate(zip(want, r["jvp"])):
        if w is None:
            continue
        if got["dtype"] != d or list(got["shape"]) != list(w.shape):
            problems.append("%sjvp %d: %s %s, expected %s %s" % (variant, k, got["dtype"], got["shape"], d,
                                                                list(w.shape)))
            continue
        wv = round_to(w.numpy().reshape(-1), d)
        gv, wv = masked_grads(case, Input(d, w.shape, []), dec_values(got["data"], d), wv)
        # As for vjps: relative to the largest tangent of the result, of the inputs and of the terms,
        # and to the input tangents times the op's amplification of errors.
        finite = wv[np.isfinite(wv)]
        sc = max(np.abs(finite).max() if finite.size else 0.0, sc_terms, sc_terms * amp)
        msg = compare(gv, wv, d, op.grad_rtol * op.rtol * grad_precision(case, d), sc,
                      nan_may_be_finite=minmax_in_chain(case) and deviation("minmax_jvp_select"))
        if msg:
            problems.append("%sjvp of output %d: %s" % (variant, k, msg))
    return problems


def minmax_in_chain(case):
    return case["op"] == "chain" and any(st[0] in ("maximum", "minimum") for st in case["params"]["steps"])


def magnitudes(fn, ts, dts, params):
    """An Op's scale or bound function applied to the reference inputs, as numpy (None: none)."""
    if fn is None:
        return None
    try:
        with torch.no_grad():
            m = fn([t.detach() for t in ts], dts, params)
        if isinstance(m, (list, tuple)):  # one per output
            return [x.detach().to(torch.float64).numpy() for x in m]
        return None if m is None else m.detach().to(torch.float64).numpy()
    except Exception:
        return None


def check_partition(case, x, dt, got, d):
    p = case["params"]
    ax = p["axis"] % x.dim()
    vals = x
    if case["op"] == "argpartition":
        idx = torch.from_numpy(got.astype(np.int64).reshape(x.shape))
        if ((idx < 0) | (idx >= x.shape[ax])).any():
            return "index out of range"
        if not (torch.sort(idx, dim=ax)[0] == torch.arange(x.shape[ax]).reshape(
                [-1 if i == ax else 1 for i in range(x.dim())])).all():
            return "indices are not a permutation along the axis"
        vals = torch.gather(x, ax, idx)
    else:
        vals = torch.from_numpy(got.reshape(x.shape)) if dt in FLOATS else torch.from_numpy(
            got.astype(np.int64).reshape(x.shape))
    key = lambda t: (t.to(torch.float64) if dt != "int64" else t)  # noqa: E731
    s = torch.sort(key(x), dim=ax)[0]
    v = key(vals) if case["op"] == "argpartition" else key(vals)
    if not torch.equal(torch.sort(v, dim=ax)[0].nan_to_num(nan=1e308), s.nan_to_num(nan=1e308)):
        return "not a rearrangement of the input"
    kth = p["kth"] % x.shape[ax]
    pivot = s.narrow(ax, kth, 1).nan_to_num(nan=math.inf)
    vv = v.nan_to_num(nan=math.inf)
    n = x.shape[ax]
    if not ((vv.narrow(ax, kth, 1) == pivot).all() and (vv.narrow(ax, 0, kth) <= pivot).all() and
            (vv.narrow(ax, kth, n - kth) >= pivot).all()):
        return "element %d is not the pivot a sort would put there, or a side is on the wrong side" % kth
    return None


def extreme_inputs(case):
    """True when a float input holds a finite nonzero value whose square overflows or underflows in
    its dtype (beyond sqrt(FMAX), below sqrt(TINY)): derivative rules square their inputs (arctan2's
    a^2 + b^2) or divide by them in the input's dtype."""
    for i in case["_inputs"]:
        if i.dt in FLOATS:
            v = np.abs(np.asarray(i.values, dtype=np.float64))
            v = v[np.isfinite(v) & (v != 0)]
            if v.size and (v.max() > math.sqrt(FMAX[i.dt]) or v.min() < math.sqrt(TINY[i.dt])):
                return True
    return False


def grad_terms(ts):
    """The tensors whose gradients are the terms the inputs' gradients sum: the viewed inputs (a
    broadcast view's gradient is summed over its copies) and the per-use copies a chain makes."""
    return [t for t in ts if t.requires_grad and not t.is_leaf] + TERMS


def term_scale(grads):
    """The largest finite magnitude among gradient terms (0 when none)."""
    m = 0.0
    for g in grads:
        if g is not None and g.numel():
            a = g.detach().abs()
            a = a[torch.isfinite(a)]
            if a.numel():
                m = max(m, float(a.max()))
    return m


def masked_grads(case, inp, gv, want):
    """Gradient elements not compared (known_differences: half_grad_intermediates,
    grad_intermediates_extreme): beyond FMAX / 64 of the dtype, or non-finite where the reference is
    finite, for half types always and for float32/float64 when an input is extreme."""
    if inp.dt in ("float16", "bfloat16"):
        deviation("half_grad_intermediates")
    elif extreme_inputs(case):
        deviation("grad_intermediates_extreme")
    else:
        return gv, want
    huge = (np.abs(want) > FMAX[inp.dt] / 64) | (~np.isfinite(gv) & np.isfinite(want))  # over/underflow
    return np.where(huge, 0.0, gv), np.where(huge, 0.0, want)


# Ops that write their other inputs into the first one's dtype.
CAST_INTO_FIRST = {"slice_update", "slice_update_add", "slice_update_prod", "slice_update_max", "slice_update_min",
                   "put_along_axis", "scatter_add_axis", "scatter_add_take", "scatter", "scatter_add", "scatter_prod",
                   "scatter_max", "scatter_min", "masked_scatter"}


def grad_precision(case, dt):
    """How many times RTOL[dt] a derivative w.r.t. an input of dtype dt may be off by: 1, except for an
    input cast into a less precise dtype (CAST_INTO_FIRST), and in a chain whose steps compute in a less precise dtype (a float64 input through a float32 step: the
    derivative has float32's error, as the value does)."""
    if case["op"] in CAST_INTO_FIRST:
        # The update is cast into the array's dtype: its derivative has that dtype's error.
        first = case["_inputs"][0].dt
        return max(RTOL[first] if first in FLOATS else 0.0, RTOL[dt]) / RTOL[dt]
    if case["op"] != "chain":
        return 1.0
    regs = [i.dt for i in case["_inputs"]]
    for step in case["params"]["steps"]:
        args = [regs[i] for i in step[1:]]
        d = args[0] if len(args) == 1 else promote(args[0], args[1])
        if step[0] in UNARY_FLOAT or step[0] in ("divide",):
            d = floating(d)
        regs.append(d)
    return max([RTOL[d] for d in regs if d in FLOATS] + [RTOL[dt]]) / RTOL[dt]


def check_vjp(case, op, bases, ts, outs, r, variant):
    if "vjp" not in r:
        return [variant + "no vjp in the result"]
    cots = [torch.tensor(dec_values(c["data"], c["dtype"]).reshape(c["shape"]), dtype=torch.float64)
            for c in case["vjp"]]
    float_outs = [t for t, d in outs]
    leaves = [b for b in bases if b.requires_grad]
    if not leaves:
        return []
    terms = grad_terms(ts)
    try:
        grads = torch.autograd.grad(float_outs, leaves + terms, cots, allow_unused=True, retain_graph=True)
    except RuntimeError as e:
        return [] if "does not require grad" in str(e) else ["reference vjp failed: %s" % e]
    # Gradient errors are relative to the largest gradient element, to the cotangents and to the
    # largest term summed into a gradient (sums over broadcast or reduced axes, and several uses of
    # one value, cancel down to values far below any of them).
    sc_terms = max([term_scale(grads[len(leaves):])] + [float(c.abs().max()) for c in cots if c.numel()])
    grads = iter(grads[:len(leaves)])
    problems = []
    for k, (inp, b) in enumerate(zip(case["_inputs"], bases)):
        if not b.requires_grad:
            continue
        gr = next(grads)
        want = np.zeros(b.numel()) if gr is None else gr.detach().numpy().reshape(-1)
        want = round_to(want, inp.dt)
        got = r["vjp"][k]
        if got["dtype"] != inp.dt or list(got["shape"]) != inp.base_shape:
            problems.append("%svjp %d: %s %s, expected %s %s" % (variant, k, got["dtype"], got["shape"], inp.dt,
                                                                inp.base_shape))
            continue
        gv, want = masked_grads(case, inp, dec_values(got["data"], inp.dt), want)
        finite = want[np.isfinite(want)]
        sc = max(np.abs(finite).max() if finite.size else 0.0, sc_terms)
        msg = compare(gv, want, inp.dt, op.grad_rtol * op.rtol * grad_precision(case, inp.dt), sc)
        if msg:
            problems.append("%svjp of input %d: %s" % (variant, k, msg))
    return problems


def summarize(res):
    if "error" in res:
        return "error"
    return ", ".join("%s%s" % (o["dtype"], o["shape"]) for o in res["outputs"])


# ---- cases ----
def make_case(g, cid, op_name=None):
    if op_name is not None and op_name not in OPS:  # an op of the complex family alone (fft)
        return make_complex_case(g, cid, op_name)
    names = sorted(OPS)
    weights = [WEIGHTS.get(n, 1) for n in names]
    name = op_name or g.r.choices(names, weights)[0]
    op = OPS[name]
    big = g.r.random() < 0.015 and name not in ("pad", "take", "split", "concatenate", "stack", "slice_update",
                                                "take_along_axis", "put_along_axis", "scatter_add_axis",
                                                "scatter_add_take", "conv_general", "conv3d", "conv_transpose1d",
                                                "conv_transpose2d", "conv_transpose3d", "max_pool", "avg_pool", "sdpa",
                                                "cross_entropy", "arange")
    inputs, params = op.gen(g, big)
    case = {"id": cid, "op": name, "_inputs": inputs, "params": params}
    # Differentiate where the output is floating and the inputs hold no special values (derivative
    # conventions at NaN, infinities and kinks are not what this tester checks).
    if op.grad and any(i.dt in FLOATS for i in inputs) and g.r.random() < 0.5:
        outs = differentiable_outputs(case, op)
        if outs:
            case["vjp"] = [{"dtype": d, "shape": list(t.shape),
                            "data": enc_values(round_to(g.np.standard_normal(t.numel()), d), d)} for t, d in outs]
    # jvps draw from a stream of their own per case, so that adding them left every case of a seed
    # (its inputs, parameters and vjp) as it was: replays of older runs still find their cases.
    side = np.random.default_rng([g.seed, cid, 2])
    if op.jvp and any(i.dt in FLOATS for i in inputs) and side.random() < JVP_FRACTION:
        if differentiable_outputs(case, op):
            case["jvp"] = [{"dtype": i.dt, "shape": list(i.base_shape),
                            "data": enc_values(round_to(side.standard_normal(len(i.values)), i.dt), i.dt)}
                           if i.dt in FLOATS else None for i in inputs]
    # The complex64 family (above) replaces the case now and then, drawn from a stream of its own.
    cs = np.random.default_rng([g.seed, cid, 4])
    if cs.random() < COMPLEX_FRACTION and (op_name is None or op_name in COPS):
        return make_complex_case(Gen(int(cs.integers(1 << 62))), cid, op_name)
    # The unsigned family (above) replaces the case now and then, drawn from a stream of its own.
    us = np.random.default_rng([g.seed, cid, 3])
    if us.random() < UNSIGNED_FRACTION and (op_name is None or op_name in UOPS):
        return make_unsigned_case(Gen(int(us.integers(1 << 62))), cid, op_name)
    return case


JVP_FRACTION = 0.3


def differentiable_outputs(case, op):
    """The reference's outputs when all are floating and finite and the float inputs are finite,
    else None: where derivatives are compared."""
    try:
        _, _, _, outs = reference(case, op, False)
    except Exception:
        return None
    if case["op"] == "chain" and not chain_finite(case):
        return None
    inputs = case["_inputs"]
    if outs and all(d in FLOATS and bool(torch.isfinite(t).all()) for t, d in outs) and all(
            np.isfinite(np.asarray(i.values, dtype=np.float64)).all() for i in inputs if i.dt in FLOATS):
        return outs
    return None


def wire(case):
    c = {k: v for k, v in case.items() if not k.startswith("_")}
    c["inputs"] = [i.to_json() for i in case["_inputs"]]
    return json.dumps(c)


def from_wire(line):
    c = json.loads(line)
    c["_inputs"] = [Input.from_json(j) for j in c.get("inputs", [])]
    return c


# ---- running ----
class Runner:
    def __init__(self, path, fusion, timeout):
        self.path, self.fusion, self.timeout = path, fusion, timeout
        self.primitives = set()

    def run(self, cases):
        """{id: result} for the cases; a crash or hang is pinned to its case ({"crash": reason})."""
        results = {}
        pending = list(cases)
        while pending:
            got, fail = self._run_once(pending)
            results.update(got)
            pending = [c for c in pending if c["id"] not in got]
            if fail is None:
                break
            # The first unanswered case is the suspect; alone, it must fail the same way to be blamed.
            suspect = pending[0]
            alone, fail_alone = self._run_once([suspect])
            if fail_alone is not None:
                results[suspect["id"]] = {"crash": fail_alone}
            elif suspect["id"] in alone:
                results[suspect["id"]] = dict(alone[suspect["id"]])
                results[suspect["id"]]["crash_in_batch"] = fail
            pending = pending[1:]
        return results

    def _run_once(self, cases):
        data = "".join(wire(c) + "\n" for c in cases)
        with tempfile.TemporaryFile("w+") as f:
            f.write(data)
            f.seek(0)
            try:
                p = subprocess.run([self.path, "--fusion", self.fusion, "--primitives", "--threads", "2"],
                                   stdin=f, capture_output=True, text=True, timeout=self.timeout)
                out, rc, err = p.stdout, p.returncode, p.stderr
            except subprocess.TimeoutExpired as e:
                out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                rc, err = "timeout after %ds" % self.timeout, ""
        got = {}
        for line in out.splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "primitives" in j:
                self.primitives.update(j["primitives"])
            elif "id" in j:
                got[j["id"]] = j
        if rc == 0 and len(got) == len(cases):
            return got, None
        reason = rc if isinstance(rc, str) else ("signal %d" % -rc if rc < 0 else "exit code %d" % rc)
        tail = err.strip().splitlines()[-1:] if err else []
        return got, "%s%s" % (reason, (": " + tail[0][:200]) if tail else "")


def describe(case):
    ins = ", ".join("%s%s%s" % (i.dt, i.shape, " view " + json.dumps(i.recipe) if i.recipe else "")
                    for i in case["_inputs"])
    return "%s(%s) params %s%s%s" % (case["op"], ins, json.dumps(case.get("params", {})),
                                     " +vjp" if "vjp" in case else "", " +jvp" if "jvp" in case else "")


def pending_fix(case):
    for key, (_, pred) in PENDING_FIXES.items():
        try:
            if pred(case):
                return key
        except Exception:
            pass
    return None


def registry_primitives():
    import re
    text = open(os.path.join(HERE, "..", "registry.h")).read()
    return set(re.findall(r'(?:checked|none)\("([^"]+)"', text))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", required=True, help="path of the loom_diff executable")
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=None, help="random when not given (printed)")
    ap.add_argument("--short", action="store_true",
                    help="CTest mode: also run regressions.jsonl, check coverage, skip PENDING_FIXES cases")
    ap.add_argument("--replay", type=int, default=None, help="run only the case with this id (same seed)")
    ap.add_argument("--emit", action="store_true", help="with --replay: print the case's JSON line and exit")
    ap.add_argument("--op", default=None, help="generate only cases of this op")
    ap.add_argument("--fusion", default="both", choices=["on", "off", "both"])
    ap.add_argument("--batch", type=int, default=400)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per batch before it counts as a hang")
    ap.add_argument("--dump", default=None, help="write the generated cases (JSON lines) here")
    ap.add_argument("--regressions", default=os.path.join(HERE, "regressions.jsonl"))
    ap.add_argument("--unsigned-fraction", type=float, default=UNSIGNED_FRACTION_DEFAULT,
                    help="share of cases drawn from the uint16/32/64 family (1: only those)")
    ap.add_argument("--complex-fraction", type=float, default=COMPLEX_FRACTION_DEFAULT,
                    help="share of cases drawn from the complex64 family (1: only those)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's result")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    if not a.emit:
        print("diff: seed %d, %d cases, runner %s, fusion %s" % (seed, a.cases, a.runner, a.fusion))
        sys.stdout.flush()

    globals()["UNSIGNED_FRACTION"] = a.unsigned_fraction
    globals()["COMPLEX_FRACTION"] = a.complex_fraction
    g = Gen(seed)
    cases = []
    for cid in range(a.cases):
        c = make_case(g, cid, a.op)
        if a.replay is None or cid == a.replay:
            cases.append(c)
    if a.replay is not None:
        if a.emit:  # the case alone, for piping into the runner: ... --emit | loom_diff
            print(wire(cases[0]))
            return 0
        print("case: " + wire(cases[0]))
    skipped = []
    if a.short:
        kept = []
        for c in cases:
            k = pending_fix(c)
            (skipped if k else kept).append((c, k) if k else c)
        cases = kept
    regressions = []
    if a.short and a.replay is None:
        for line in open(a.regressions):
            line = line.strip()
            if line and not line.startswith("#"):
                c = from_wire(line)
                c["id"] = "regression:" + c["name"]
                regressions.append(c)
    if a.dump:
        with open(a.dump, "w") as f:
            for c in cases + regressions:
                f.write(wire(c) + "\n")

    runner = Runner(a.runner, a.fusion, a.timeout)
    failures = []
    allc = cases + regressions
    for start in range(0, len(allc), a.batch):
        batch = allc[start:start + a.batch]
        results = runner.run(batch)
        for c in batch:
            res = results.get(c["id"])
            if res is None:
                problems = ["no result (runner failed before it)"]
            elif "crash" in res:
                problems = ["crash: runner died (%s)" % res["crash"]]
            else:
                try:
                    problems = check(c, res)
                except Exception as e:  # a bug of the tester itself must not pass silently
                    problems = ["tester error: %s: %s" % (type(e).__name__, e)]
                if "crash_in_batch" in res:
                    problems.append("crash: runner died in a batch after this case (%s), not alone"
                                    % res["crash_in_batch"])
            if a.verbose:
                print(c["id"], describe(c), "->", summarize(res) if res and "crash" not in res else res)
            if problems:
                failures.append((c, problems))

    by_op = {}
    for c, problems in failures:
        by_op.setdefault(c["op"], []).append(c)
        cid = c["id"]
        print("\nDISAGREEMENT case %s (seed %d): %s" % (cid, seed, describe(c)))
        for p in problems[:4]:
            print("    " + p)
        if isinstance(cid, int):
            print("    replay: /usr/bin/python3 %s --runner %s --seed %d --cases %d --replay %d" % (
                os.path.relpath(__file__), a.runner, seed, a.cases, cid) + (" --op " + a.op if a.op else "") +
                  (" --unsigned-fraction %g" % a.unsigned_fraction if a.unsigned_fraction != UNSIGNED_FRACTION_DEFAULT else "") +
                  (" --complex-fraction %g" % a.complex_fraction if a.complex_fraction != COMPLEX_FRACTION_DEFAULT else ""))
        else:
            print("    replay: grep '\"%s\"' %s | %s" % (c["name"], os.path.relpath(a.regressions), a.runner))

    status = 1 if failures else 0
    # Coverage is a property of the generator, not of the build: checked on full short runs (3000
    # cases hit every op); the sanitizer pass's 600 cases need not make every primitive.
    if a.short and a.replay is None and a.op is None and a.cases >= 3000:
        seen = runner.primitives
        reg = registry_primitives()
        missing = sorted(p for p in reg if p not in seen and p not in NOT_COVERED)
        stale = sorted(p for p in NOT_COVERED if p in seen)
        if missing:
            status = 1
            print("\nCOVERAGE: registry primitives neither made by any case nor listed in "
                  "known_differences.NOT_COVERED: %s" % ", ".join(missing))
        if stale:
            print("\nnote: NOT_COVERED lists primitives the cases do make (delete them there): %s" % ", ".join(stale))
        gone = sorted(p for p in NOT_COVERED if p not in reg)
        if gone:
            status = 1
            print("\nCOVERAGE: NOT_COVERED lists primitives tests/registry.h does not have: %s" % ", ".join(gone))
    ops_run = {}
    for c in cases:
        ops_run[c["op"]] = ops_run.get(c["op"], 0) + 1
    print("\ndiff: seed %d: %d cases (%d with vjp, %d with jvp) over %d ops, %d regression cases, %d skipped as "
          "PENDING_FIXES, %d disagreements%s" % (seed, len(cases), sum("vjp" in c for c in cases),
                                                 sum("jvp" in c for c in cases), len(ops_run), len(regressions),
                                  len(skipped), len(failures),
                                  (" in " + ", ".join("%s (%d)" % (k, len(v)) for k, v in sorted(by_op.items())))
                                  if failures else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
