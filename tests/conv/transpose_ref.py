# Expected values of tests/conv/transpose_test.cpp (kTorchCases): PyTorch float64 conv3d and
# conv_transpose{1,2,3}d on the test's inputs, permuted to and from channels-last.
#   /usr/bin/python3 tests/conv/transpose_ref.py   (prints the C++ table; paste it into the test)
# Inputs: v_i = ((37 i + salt) mod 17 - 8) / 8, exact in float64, as vals() in the test.
# Loom's weight is (C_out, K..., C_in / groups) for every op; PyTorch's transposed weight is
# (C_in, C_out / groups, K...) with w_torch[g*Cin/G + i, o, k...] = w_loom[g*Cout/G + o, k..., i].
import torch
import torch.nn.functional as F


def vals(shape, salt):
    n = 1
    for d in shape:
        n *= d
    v = [((i * 37 + salt) % 17 - 8.0) / 8.0 for i in range(n)]
    return torch.tensor(v, dtype=torch.float64).reshape(shape)


# (op, x shape, w shape, stride, padding, dilation, output_padding, groups, x salt, w salt)
CASES = [
    ("ct1d", (2, 4, 3), (2, 3, 3), [2], [1], [1], [1], 1, 1, 2),
    ("ct1d", (2, 5, 4), (6, 3, 2), [3], [2], [2], [1], 2, 3, 4),
    ("ct1d", (1, 4, 2), (3, 2, 2), [2], [3], [1], [1], 1, 5, 6),  # padding > dilation*(K-1): cropped
    ("ct1d", (1, 3, 2), (2, 3, 2), [1], [1], [3], [2], 1, 7, 8),  # output_padding < dilation only
    ("ct2d", (1, 3, 2, 4), (2, 2, 3, 2), [2, 1], [1, 0], [2, 1], [1, 0], 2, 9, 10),
    ("ct2d", (2, 2, 3, 3), (4, 3, 1, 3), [1, 2], [0, 1], [1, 1], [0, 1], 1, 11, 12),
    ("ct2d", (2, 3, 2, 6), (9, 2, 2, 2), [2, 2], [2, 1], [1, 2], [1, 1], 3, 13, 14),
    ("ct3d", (1, 2, 3, 2, 2), (3, 2, 2, 2, 2), [1, 2, 1], [0, 1, 0], [1, 1, 1], [0, 0, 0], 1, 15, 16),
    ("ct3d", (2, 2, 3, 2, 4), (4, 1, 2, 3, 2), [2, 1, 2], [0, 1, 1], [1, 2, 1], [1, 0, 1], 2, 17, 18),
    ("conv3d", (1, 3, 4, 3, 2), (2, 2, 2, 2, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], None, 1, 19, 20),
    ("conv3d", (2, 4, 3, 5, 4), (6, 2, 1, 3, 2), [2, 1, 2], [1, 0, 1], [1, 2, 1], None, 2, 21, 22),
]


def channels_first(t):
    return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))


def channels_last(t):
    return t.permute(0, *range(2, t.dim()), 1)


def torch_transposed_weight(w, groups):
    # (C_out, K..., Cg) -> (G, C_out/G, K..., Cg) -> (G, Cg, C_out/G, K...) -> (C_in, C_out/G, K...)
    cout, cg = w.shape[0], w.shape[-1]
    nk = w.dim() - 2
    w = w.reshape(groups, cout // groups, *w.shape[1:])
    w = w.permute(0, nk + 2, 1, *range(2, nk + 2))
    return w.reshape(groups * cg, cout // groups, *w.shape[3:])


def run(op, x, w, stride, padding, dilation, output_padding, groups):
    xc = channels_first(x)
    if op == "conv3d":
        y = F.conv3d(xc, channels_first(w), None, stride, padding, dilation, groups)
    else:
        fn = {"ct1d": F.conv_transpose1d, "ct2d": F.conv_transpose2d, "ct3d": F.conv_transpose3d}[op]
        y = fn(xc, torch_transposed_weight(w, groups), None, stride, padding, output_padding, groups, dilation)
    return channels_last(y)


def lst(v):
    return "{" + ", ".join(str(a) for a in v) + "}"


if __name__ == "__main__":  # transpose_grad2_ref.py imports the helpers
    for (op, xs, ws, st, pd, dl, opad, g, sx, sw) in CASES:
        y = run(op, vals(xs, sx), vals(ws, sw), st, pd, dl, opad, g)
        print('    {"%s", %s, %s, %s, %s, %s, %s, %d, %d, %d, %s,\n     {%s}},' % (
            op, lst(xs), lst(ws), lst(st), lst(pd), lst(dl), lst(opad or []), g, sx, sw, lst(y.shape),
            ", ".join(repr(float(a)) for a in y.flatten().tolist())))
