#!/usr/bin/env python3
# A tiny independent GGUF writer (numpy + struct, from the spec in ggml's docs/gguf.md) that prints
# the bytes and expected values pasted into tests/io/gguf_test.cpp:  /usr/bin/python3 gguf_expected.py
import struct
import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
       U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, numpy-order shape, ggml type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + value(t, v)
    offset, datas = 0, b""
    for name, shape, gtype, data in tensors:
        offset += -offset % alignment
        datas += b"\0" * (offset - len(datas)) + data
        out += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", gtype, offset)
        offset += len(data)
    out += b"\0" * (-len(out) % alignment)
    return out + datas


def q4_0_block(d, q):  # q: 32 codes 0..15; w = d * (q - 8)
    return np.float16(d).tobytes() + bytes((q[j] & 15) | (q[16 + j] << 4) for j in range(16))


def q4_1_block(d, m, q):  # w = d * q + m
    return np.float16(d).tobytes() + np.float16(m).tobytes() + bytes((q[j] & 15) | (q[16 + j] << 4) for j in range(16))


def q8_0_block(d, q):  # q: 32 int8; w = d * q
    return np.float16(d).tobytes() + np.array(q, np.int8).tobytes()


def hexlines(b, width=48):
    h = b.hex()
    return "\n".join('    "%s"' % h[i:i + width * 2] for i in range(0, len(h), width * 2))


# ---- 1. a file to load: every metadata type and every tensor type Loom reads ----
rng = np.random.RandomState(0)
q4 = [list(rng.randint(0, 16, 32)) for _ in range(4)]
q4b = [list(rng.randint(0, 16, 32)) for _ in range(2)]
q8 = [list(rng.randint(-128, 128, 32)) for _ in range(2)]
d4, d4b, m4b, d8 = [0.5, -0.25, 0.125, 2.0], [0.75, 1.5], [-1.0, 0.5], [0.0625, -0.5]
f32 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
kvs = [("general.architecture", STR, "loom"), ("u8", U8, 200), ("i8", I8, -7), ("u16", U16, 60000),
       ("i16", I16, -30000), ("u32", U32, 4000000000), ("i32", I32, -123456), ("f32", F32, 1.5),
       ("flag", BOOL, True), ("u64", U64, 2**63 + 5), ("i64", I64, -2**40), ("f64", F64, 0.1),
       ("ints", ARR, (I32, [1, -2, 3])), ("names", ARR, (STR, ["a", "", "ccc"])),
       ("floats", ARR, (F32, [0.5, -1.0]))]
tensors = [("f32", (2, 3), 0, f32.tobytes()),
           ("f16", (3,), 1, np.array([1.5, -2.0, 65504], np.float16).tobytes()),
           ("bf16", (2,), 30, (np.array([1.5, -3.0], np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()),
           ("i8", (1, 4), 24, np.array([[-128, -1, 0, 127]], np.int8).tobytes()),
           ("i16", (2,), 25, np.array([-32768, 32767], np.int16).tobytes()),
           ("i32", (2, 1, 2), 26, np.array([-5, 6, 7, -8], np.int32).tobytes()),
           ("blk.q4_0.weight", (2, 64), 2, b"".join(q4_0_block(d4[i], q4[i]) for i in range(4))),
           ("blk.q4_1.weight", (1, 64), 3, b"".join(q4_1_block(d4b[i], m4b[i], q4b[i]) for i in range(2))),
           ("q8", (2, 32), 8, b"".join(q8_0_block(d8[i], q8[i]) for i in range(2)))]
print("// ---- file 1 (%d bytes) ----" % len(gguf(kvs, tensors)))
print(hexlines(gguf(kvs, tensors)))
deq4 = [float(np.float16(d4[i])) * (q - 8) for i in range(4) for q in q4[i]]
deq4b = [float(np.float16(d4b[i])) * q + float(np.float16(m4b[i])) for i in range(2) for q in q4b[i]]
deq8 = [float(np.float16(d8[i])) * q for i in range(2) for q in q8[i]]
print("// q4_0 dequantized:", ", ".join("%g" % v for v in deq4))
print("// q4_1 dequantized:", ", ".join("%g" % v for v in deq4b))
print("// q8_0 dequantized:", ", ".join("%g" % v for v in deq8))

# ---- 2. what save_gguf must write: sorted names and keys, 32-byte alignment ----
kvs2 = [("count", U32, 3), ("ids", ARR, (I64, [5, -6])), ("name", STR, "tiny"), ("tags", ARR, (STR, ["x", "yz"]))]
t2 = [("a", (2, 3), 0, (np.arange(6, dtype=np.float32) * 0.5).reshape(2, 3).tobytes()),
      ("b", (3,), 24, np.array([1, -2, 3], np.int8).tobytes()),
      ("c", (2, 2), 1, np.array([[0.5, 1], [2, -4]], np.float16).tobytes())]
print("// ---- file 2 (%d bytes) ----" % len(gguf(kvs2, t2)))
print(hexlines(gguf(kvs2, t2)))
