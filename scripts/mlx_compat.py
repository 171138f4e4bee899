#!/usr/bin/env python3
"""How much of MLX's own C++ test-suite compiles and passes against Loom (issue 23).

For each of MLX's tests/<name>_tests.cpp that makes sense on a CPU, this splits the file into its
TEST_CASEs and builds each case as its own program against the built Loom: the `#include "mlx/..."`
lines become `#include <loom/mlx.h>`, doctest is replaced by scripts/mlx_compat_shim.h, and the
file's own helpers (functions, templates, constants outside the cases) are kept when the case, or a
helper it keeps, names them. Each program that compiles is run with a timeout; it passes when every
CHECK in it held. Nothing of MLX is copied into the repository: the tests are read at run time from
an MLX checkout (--mlx DIR) or from the mirror's git directory (--mlx-git DIR, the default).

  scripts/mlx_compat.py                   table per file, total, histogram of first compile errors
  scripts/mlx_compat.py --json            the same as JSON (every case, its errors and output)
  scripts/mlx_compat.py --files ops,array --case 'test reshape' -v   a few cases, with their errors

Results are cached in <build>/mlx_compat/cache.json by a hash of (the case's program, the shim, the
compiler flags, the Loom library's mtime), so a re-run after no change is immediate. At most two
compilers run at once, niced.
"""
import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

TOOL_VERSION = "1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM = os.path.join(ROOT, "scripts", "mlx_compat_shim.h")
DEFAULT_MLX_GIT = "/work/.mirror/ml-explore+mlx/repo"

# The files measured: they test the array, ops, transforms and runtime a CPU build has.
MEASURED = ["array", "ops", "autograd", "random", "load", "scheduler", "allocator", "creations", "vmap",
            "arg_reduce", "eval", "utils", "device", "custom_vjp", "blas", "compile", "export_import", "linalg",
            "einsum", "fft"]
# Not measured for now (GPU-only, or areas other issues cover); their cases are counted only.
NOT_MEASURED = ["gpu", "residency"]


# ---------------------------------------------------------------- reading MLX's tests
def read_test_file(args, name):
    rel = "tests/%s_tests.cpp" % name
    if args.mlx:
        path = os.path.join(args.mlx, rel)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    r = subprocess.run(["git", "-C", args.mlx_git, "show", "%s:%s" % (args.mlx_rev, rel)],
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def code_mask(text):
    """A copy of text in which comments, string and character literals are blanked (newlines kept),
    so that braces and names can be found by plain scanning."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 1, j)
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):  # 1'000 is a digit separator
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def match_brace(mask, open_pos):
    depth = 0
    for k in range(open_pos, len(mask)):
        if mask[k] == "{":
            depth += 1
        elif mask[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    raise ValueError("unbalanced braces from offset %d" % open_pos)


def top_level_chunks(text, mask, start, end):
    """Splits text[start:end] into top-level items: preprocessor lines, declarations ending in ';'
    and definitions ending in '}' (with a following ';'). Returns (begin, end) offsets."""
    chunks = []
    i = start
    while i < end:
        while i < end and mask[i].isspace():
            i += 1
        if i >= end:
            break
        if mask[i] == "#":
            j = i
            while True:
                nl = mask.find("\n", j)
                nl = end if nl < 0 or nl > end else nl
                if text[j:nl].rstrip().endswith("\\") and nl < end:
                    j = nl + 1
                    continue
                break
            chunks.append((i, nl))
            i = nl
            continue
        j, paren = i, 0
        while j < end:
            ch = mask[j]
            if ch == "(":
                paren += 1
            elif ch == ")":
                paren -= 1
            elif ch == ";" and paren == 0:
                j += 1
                break
            elif ch == "{" and paren == 0:
                open_at = j
                j = match_brace(mask, j) + 1
                k = j
                while k < end and mask[k] in " \t":
                    k += 1
                if k < end and mask[k] == ";":
                    j = k + 1
                # a definition ends at its brace; an initializer (`x = {...}`) goes on to its ';'
                if not mask[i:open_at].rstrip().endswith("=") or mask[j - 1] == ";":
                    break
                continue
            j += 1
        chunks.append((i, j))
        i = j
    return chunks


IDENT = re.compile(r"[A-Za-z_]\w*")
KEYWORDS = {"static", "inline", "const", "constexpr", "void", "int", "auto", "template", "typename",
            "class", "struct", "namespace", "using", "return", "if", "for", "while", "unsigned",
            "std", "size_t", "bool", "float", "double", "char", "extern", "enum"}


def defined_names(text, mask, b, e):
    """The names a top-level chunk defines: [] means 'always keep it'."""
    head = mask[b:e]
    if head.lstrip().startswith("#") or head.lstrip().startswith("using"):
        return []
    m = re.match(r"\s*namespace\s*(\w*)\s*\{", head)
    if m:
        open_pos = b + head.index("{")
        close = match_brace(mask, open_pos)
        names = []
        for cb, ce in top_level_chunks(text, mask, open_pos + 1, close):
            names += defined_names(text, mask, cb, ce)
        return names
    head = re.sub(r"^\s*template\s*<[^{;]*?>\s*", "", head)
    m = re.match(r"\s*(?:struct|class|enum(?:\s+class)?)\s+(\w+)", head)
    if m:
        return [m.group(1)]
    sig = head.split("{", 1)[0]
    m = re.search(r"(\w+)\s*\(", sig)
    if m and m.group(1) not in KEYWORDS:
        return [m.group(1)]
    m = re.search(r"(\w+)\s*(?:=|;|\[)", sig)
    if m and m.group(1) not in KEYWORDS:
        return [m.group(1)]
    return []


Case = collections.namedtuple("Case", "file name line program")


def split_cases(name, text):
    mask = code_mask(text)
    cases, others = [], []
    for b, e in top_level_chunks(text, mask, 0, len(text)):
        m = re.match(r"\s*TEST_CASE\s*\(", mask[b:e])
        if m:
            title = re.match(r'\s*TEST_CASE\s*\(\s*"((?:[^"\\]|\\.)*)"', text[b:e])
            cases.append((title.group(1) if title else "?", b, e))
        else:
            others.append((b, e, defined_names(text, mask, b, e)))
    fname = "tests/%s_tests.cpp" % name

    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    def rewrite(chunk):
        chunk = re.sub(r'^[ \t]*#[ \t]*include[ \t]*"doctest/doctest\.h".*$', "// (doctest: the shim is forced in)",
                       chunk, flags=re.M)
        return re.sub(r'^[ \t]*#[ \t]*include[ \t]*"mlx/[^"]*".*$', "#include <loom/mlx.h>", chunk, flags=re.M)

    out = []
    for title, b, e in cases:
        body = mask[b:e]
        keep = [not names for (_, _, names) in others]
        used = body
        changed = True
        while changed:  # keep helpers the case names, then helpers those name
            changed = False
            for k, (ob, oe, names) in enumerate(others):
                if not keep[k] and any(re.search(r"\b%s\b" % re.escape(nm), used) for nm in names):
                    keep[k] = True
                    used += mask[ob:oe]
                    changed = True
        parts = []
        for k, (ob, oe, _) in enumerate(others):
            if keep[k] and ob < b:
                parts.append('#line %d "%s"\n%s\n' % (line_of(ob), fname, rewrite(text[ob:oe])))
        parts.append('#line %d "%s"\n%s\n' % (line_of(b), fname, rewrite(text[b:e])))
        # helpers defined after the case (rare) come after it, as in the file
        for k, (ob, oe, _) in enumerate(others):
            if keep[k] and ob > b and not text[ob:oe].lstrip().startswith("#"):
                parts.append('#line %d "%s"\n%s\n' % (line_of(ob), fname, rewrite(text[ob:oe])))
        out.append(Case(name, title, line_of(b), "".join(parts)))
    return out


# ---------------------------------------------------------------- compiler errors
def error_key(line):
    """A short name for what a compiler error says is missing or wrong."""
    msg = line.split("error: ", 1)[1].strip()
    strip_ns = lambda s: re.sub(r"\b(?:loom|mlx::core)::", "", s)
    pats = [
        (r"'([^']+)' was not declared in this scope", "{0}"),
        (r"'([^']+)' is not a member of '([^']+)'", "{1}::{0}"),
        (r"'([^']+)' in namespace '([^']+)' does not name a (?:template )?type", "{1}::{0}"),
        (r"'([^']+)' does not name a (?:template )?type", "{0}"),
        (r"'(?:class|struct) ([^']+)' has no member named '([^']+)'", "{0}::{1}"),
        (r"'([^']+)' has no member named '([^']+)'", "{0}::{1}"),
        (r"no matching function for call to '([^'(]+)\(", "no matching call: {0}(...)"),
        (r"no matching constructor", "no matching constructor"),
        (r"call of overloaded '([^'(]+)\(.*' is ambiguous", "ambiguous call: {0}(...)"),
        (r"no match for '(operator[^']+)' \(operand types? (?:is|are) '([^']+)'(?: and '([^']+)')?", "{0} ({1}, {2})"),
        (r"invalid use of incomplete type '([^']+)'", "incomplete type {0}"),
        (r"no member named '([^']+)' in '([^']+)'", "{1}::{0}"),
        (r"use of undeclared identifier '([^']+)'", "{0}"),
        (r"'([^']+)' is not a class, namespace, or enumeration", "{0} (not a namespace or class)"),
        (r"no type named '([^']+)' in '([^']+)'", "{1}::{0}"),
        (r"template argument deduction/substitution failed", "template deduction failed"),
        (r"'([^']+)' is private within this context", "private: {0}"),
        (r"'([^']+)' has not been declared", "{0}"),
        (r"too many arguments to function '(?:[^'(]*[ :])?(\w+)\(", "too many arguments: {0}(...)"),
        (r"too few arguments to function '(?:[^'(]*[ :])?(\w+)\(", "too few arguments: {0}(...)"),
        (r"conversion from '([^']+)' to non-scalar type '([^']+)' requested", "conversion {0} -> {1}"),
        (r"could not convert '.*' from '([^']+)' to '([^']+)'", "conversion {0} -> {1}"),
        (r"cannot convert '([^']+)' to '([^']+)'", "conversion {0} -> {1}"),
        (r"reference to '([^']+)' is ambiguous", "ambiguous name {0}"),
    ]
    for pat, fmt in pats:
        m = re.search(pat, msg)
        if m:
            key = fmt.format(*[(g or "") for g in m.groups()])
            key = strip_ns(key).replace(", )", ")")
            return key.replace("{anonymous}::", "")
    return strip_ns(re.sub(r"'[^']*'", "'…'", msg))[:100]


def parse_errors(stderr):
    errors = []
    for line in stderr.splitlines():
        if ": error: " in line or ": fatal error: " in line:
            where = line.split(": ", 1)[0]
            key = error_key(line.replace("fatal error: ", "error: "))
            errors.append({"key": key, "where": where, "text": line.strip()[:400]})
    return errors


# ---------------------------------------------------------------- building and running
class Builder:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.lib = os.path.join(self.build, "libloom.so")
        if not os.path.exists(self.lib):
            sys.exit("no Loom library at %s: build the 'loom' target first" % self.lib)
        self.include = os.path.join(self.build, "include")
        self.work = os.path.join(self.build, "mlx_compat")
        os.makedirs(self.work, exist_ok=True)
        self.cxx = os.environ.get("CXX", "g++")
        self.flags = ["-std=c++17", "-O1", "-w", "-fopenmp", "-I", self.include]
        with open(SHIM, "rb") as f:
            shim = f.read()
        self.lib_stamp = str(os.stat(self.lib).st_mtime_ns)
        self.salt = hashlib.sha256(b"\0".join([TOOL_VERSION.encode(), shim, " ".join([self.cxx] + self.flags).encode(),
                                               self.lib_stamp.encode()])).hexdigest()
        self.cache_path = os.path.join(self.work, "cache.json")
        self.cache = {}
        if os.path.exists(self.cache_path) and not args.no_cache:
            with open(self.cache_path) as f:
                self.cache = json.load(f)
        self.lock = threading.Lock()
        self.pch_ready = False

    def prelude(self):
        """A precompiled header holding the shim and <loom/mlx.h>: each case then parses only itself."""
        if self.pch_ready:
            return self.prelude_h
        d = os.path.join(self.work, "pch")
        os.makedirs(d, exist_ok=True)
        self.prelude_h = os.path.join(d, "prelude.h")
        text = '#include "%s"\n#include <loom/mlx.h>\n' % SHIM
        stamp = os.path.join(d, "stamp")
        if not (os.path.exists(stamp) and open(stamp).read() == self.salt):
            with open(self.prelude_h, "w") as f:
                f.write(text)
            r = subprocess.run(["nice", "-n", "10", self.cxx] + self.flags + ["-x", "c++-header", self.prelude_h,
                                "-o", self.prelude_h + ".gch"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("the prelude (shim + <loom/mlx.h>) does not compile:\n" + r.stderr[:4000])
            with open(stamp, "w") as f:
                f.write(self.salt)
        self.pch_ready = True
        return self.prelude_h

    def key(self, case):
        return hashlib.sha256((self.salt + case.program).encode()).hexdigest()[:24]

    def run_case(self, case):
        key = self.key(case)
        with self.lock:
            hit = self.cache.get(key)
        if hit is not None:
            return dict(hit, cached=True)
        res = {"file": case.file, "case": case.name, "line": case.line, "compiled": False, "passed": False,
               "errors": [], "output": ""}
        with tempfile.TemporaryDirectory(dir=self.work) as tmp:
            src = os.path.join(tmp, "case.cpp")
            exe = os.path.join(tmp, "case")
            with open(src, "w") as f:
                f.write(case.program)
            env = dict(os.environ, LC_ALL="C")
            cmd = ["nice", "-n", "10", self.cxx] + self.flags + ["-include", self.prelude(), src, "-o", exe,
                                                                 "-L", self.build, "-lloom", "-Wl,-rpath," + self.build]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0 and ("Killed signal" in r.stderr or "out of memory" in r.stderr):
                # g++ 12 sometimes runs out of memory on a case through the precompiled prelude
                # (2026-11-29: export_import's cases, 6 GB and more) but not without it.
                direct = [a for a in cmd if a != self.prelude()]
                at = direct.index("-include")
                direct[at:at + 1] = ["-include", SHIM, "-include", "loom/mlx.h"]
                r = subprocess.run(direct, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                res["errors"] = parse_errors(r.stderr)
                if not res["errors"]:
                    res["errors"] = [{"key": "link or other failure", "where": "", "text": r.stderr.strip()[-400:]}]
            else:
                res["compiled"] = True
                renv = dict(os.environ, OMP_NUM_THREADS="2")
                try:
                    p = subprocess.run(["nice", "-n", "10", exe], capture_output=True, text=True, cwd=tmp,
                                       timeout=self.args.timeout, env=renv)
                    res["passed"] = p.returncode == 0
                    res["status"] = p.returncode
                    res["output"] = (p.stdout + p.stderr)[-3000:]
                except subprocess.TimeoutExpired as e:
                    res["status"] = "timeout"
                    res["output"] = "timed out after %ss" % self.args.timeout
        # A compiler killed for want of memory (a busy machine) says nothing about the case: not cached.
        transient = any("Killed signal" in e["text"] or "internal compiler error" in e["text"] for e in res["errors"])
        with self.lock:
            if not transient:
                self.cache[key] = res
        return dict(res, cached=False)

    def save(self):
        with self.lock:
            tmp = self.cache_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.cache, f)
            os.replace(tmp, self.cache_path)


# ---------------------------------------------------------------- the report
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mlx", help="an MLX checkout (reads DIR/tests/*.cpp)")
    ap.add_argument("--mlx-git", default=DEFAULT_MLX_GIT, help="MLX git directory to read from (default %(default)s)")
    ap.add_argument("--mlx-rev", default="HEAD", help="revision in --mlx-git (default HEAD)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="Loom build directory")
    ap.add_argument("--files", help="comma-separated subset of: " + ",".join(MEASURED))
    ap.add_argument("--case", help="only cases whose name contains this text")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="compilers at once (at most 2)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a case may run")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--no-cache", action="store_true", help="ignore cached results")
    ap.add_argument("-v", "--verbose", action="store_true", help="show each failing case and why")
    ap.add_argument("--top", type=int, default=40, help="rows of the error histogram")
    ap.add_argument("--dump", help="write each case's program into this directory (for a closer look)")
    args = ap.parse_args()

    files = args.files.split(",") if args.files else MEASURED
    cases, not_measured = [], {}
    for name in files:
        text = read_test_file(args, name)
        if text is None:
            sys.exit("cannot read MLX's tests/%s_tests.cpp" % name)
        for c in split_cases(name, text):
            if args.case is None or args.case in c.name:
                cases.append(c)
    for name in NOT_MEASURED:
        text = read_test_file(args, name)
        not_measured[name] = len(split_cases(name, text)) if text else None
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        for k, c in enumerate(cases):
            with open(os.path.join(args.dump, "%s_%03d.cpp" % (c.file, k)), "w") as f:
                f.write(c.program)

    builder = Builder(args)
    jobs = max(1, min(2, args.jobs))
    results = [None] * len(cases)
    done = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(builder.run_case, c): k for k, c in enumerate(cases)}
        for fut in concurrent.futures.as_completed(futs):
            results[futs[fut]] = fut.result()
            done += 1
            if not args.json and sys.stderr.isatty():
                sys.stderr.write("\r%d/%d cases" % (done, len(cases)))
            if done % 10 == 0:
                builder.save()
    builder.save()
    if not args.json and sys.stderr.isatty():
        sys.stderr.write("\r")

    per_file = collections.OrderedDict()
    for name in files:
        per_file[name] = {"cases": 0, "compiled": 0, "passed": 0}
    first = collections.Counter()
    anywhere = collections.Counter()
    for r in results:
        pf = per_file[r["file"]]
        pf["cases"] += 1
        pf["compiled"] += r["compiled"]
        pf["passed"] += r["passed"]
        if not r["compiled"] and r["errors"]:
            first[r["errors"][0]["key"]] += 1
            for k in set(e["key"] for e in r["errors"]):
                anywhere[k] += 1
    total = {k: sum(p[k] for p in per_file.values()) for k in ("cases", "compiled", "passed")}
    report = {"mlx": args.mlx or "%s@%s" % (args.mlx_git, args.mlx_rev), "files": per_file, "total": total,
              "first_compile_error": first.most_common(), "compile_error_anywhere": anywhere.most_common(),
              "not_measured": not_measured, "cases": results}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return

    print("%-14s %6s %9s %7s" % ("file", "cases", "compiled", "passed"))
    for name, p in per_file.items():
        print("%-14s %6d %9d %7d" % (name, p["cases"], p["compiled"], p["passed"]))
    print("%-14s %6d %9d %7d" % ("total", total["cases"], total["compiled"], total["passed"]))
    nm = ", ".join("%s (%s)" % (k, v) for k, v in not_measured.items())
    print("\nnot measured (cases): " + nm)
    print("\nfirst compile error of each case that does not compile (cases: what):")
    for key, n in first.most_common(args.top):
        print("%5d  %s" % (n, key))
    print("\nerrors anywhere in a case that does not compile (cases: what):")
    for key, n in anywhere.most_common(args.top):
        print("%5d  %s" % (n, key))
    ran_failed = [r for r in results if r["compiled"] and not r["passed"]]
    if ran_failed:
        print("\ncompiled but failed (%d):" % len(ran_failed))
        for r in ran_failed:
            print("  %s_tests.cpp:%d  %s  [%s]" % (r["file"], r["line"], r["case"], r.get("status")))
            if args.verbose:
                for ln in r["output"].strip().splitlines()[-12:]:
                    print("      " + ln)
    if args.verbose:
        print("\ndid not compile:")
        for r in results:
            if not r["compiled"]:
                print("  %s_tests.cpp:%d  %s" % (r["file"], r["line"], r["case"]))
                for e in r["errors"][:3]:
                    print("      " + e["text"][:300])


if __name__ == "__main__":
    main()
