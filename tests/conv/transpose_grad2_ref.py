# Expected values of tests/conv/transpose_test.cpp (kSecondOrder): PyTorch 1.13 float64 double backward
# of conv_transpose{1,2,3}d. For y = conv_transpose(x, w) and the first-order vjp (gx, gw) of y at
# cotangent c, the scalar S(x, w, c) = sum(gx * dx) + sum(gw * dw); printed: dS/dx, dS/dw, dS/dc.
#   /usr/bin/python3 tests/conv/transpose_grad2_ref.py   (prints the C++ table; paste it into the test)
# Every array is vals(shape, salt) of transpose_ref.py, in Loom's channels-last layout (permuted to
# PyTorch's inside the differentiated function, so the gradients come back in Loom's layout).
import torch

from transpose_ref import channels_first, channels_last, torch_transposed_weight, vals
import torch.nn.functional as F

# (op, x shape, w shape, stride, padding, dilation, output_padding, groups, salt)
CASES = [
    ("ct1d", (2, 3, 2), (2, 2, 2), [2], [1], [1], [1], 1, 30),
    ("ct1d", (1, 4, 4), (4, 3, 2), [3], [2], [2], [1], 2, 31),
    ("ct1d", (1, 3, 2), (2, 2, 2), [2], [3], [1], [1], 1, 32),  # padding beyond dilation * (K - 1): cropped
    ("ct2d", (1, 2, 2, 2), (2, 2, 2, 2), [2, 1], [1, 0], [1, 1], [1, 0], 1, 33),
    ("ct2d", (2, 2, 3, 4), (2, 3, 1, 2), [1, 2], [0, 1], [2, 1], [1, 1], 2, 34),
    ("ct3d", (1, 2, 2, 1, 2), (2, 2, 1, 2, 2), [2, 1, 1], [1, 0, 0], [1, 1, 2], [1, 0, 1], 1, 35),
    ("ct3d", (2, 1, 2, 2, 4), (2, 2, 2, 1, 2), [1, 2, 1], [0, 1, 0], [1, 1, 1], [0, 1, 0], 2, 36),
]


def ct(op, x, w, stride, padding, dilation, output_padding, groups):
    fn = {"ct1d": F.conv_transpose1d, "ct2d": F.conv_transpose2d, "ct3d": F.conv_transpose3d}[op]
    y = fn(channels_first(x), torch_transposed_weight(w, groups), None, stride, padding, output_padding, groups,
           dilation)
    return channels_last(y)


def lst(v):
    return "{" + ", ".join(str(a) for a in v) + "}"


def nums(t):
    return "{" + ", ".join(repr(float(a)) for a in t.flatten().tolist()) + "}"


if __name__ == "__main__":
    for (op, xs, ws, st, pd, dl, opad, g, salt) in CASES:
        x = vals(xs, salt).requires_grad_(True)
        w = vals(ws, salt + 1).requires_grad_(True)
        y = ct(op, x, w, st, pd, dl, opad, g)
        c = vals(tuple(y.shape), salt + 2).requires_grad_(True)
        dx, dw = vals(xs, salt + 3), vals(ws, salt + 4)
        gx, gw = torch.autograd.grad(y, (x, w), c, create_graph=True)
        s = (gx * dx).sum() + (gw * dw).sum()
        sx, sw, sc = torch.autograd.grad(s, (x, w, c))
        print('    {"%s", %s, %s, %s, %s, %s, %s, %d, %d, %s,\n     %s,\n     %s,\n     %s},' % (
            op, lst(xs), lst(ws), lst(st), lst(pd), lst(dl), lst(opad), g, salt, lst(y.shape), nums(sx), nums(sw),
            nums(sc)))
