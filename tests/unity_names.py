#!/usr/bin/env python3
"""The test files of an area compile as one unit (CMake's UNITY_BUILD; tests/CMakeLists.txt). Two of
them defining a helper of one name at file scope would then clash, or worse, overload each other
silently: a call in one file could pick the other file's function. This check lists names defined at
file scope in more than one file of an area; helpers shared by an area belong in a header."""
import collections
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
# Unindented definitions: functions, types and aliases, constants.
fn = re.compile(r"(?:template\s*<[^>]*>\s*)?(?:static\s+|inline\s+|constexpr\s+)*[A-Za-z_][\w:<>,\s\*&]*?[\s\*&]([A-Za-z_]\w*)\s*\(")
ty = re.compile(r"(?:struct|class|enum(?: class)?)\s+([A-Za-z_]\w*)|using\s+([A-Za-z_]\w*)\s*=")
var = re.compile(r"(?:static\s+)?(?:constexpr\s+|const\s+)+[\w:<>,\s\*&]+?\s([A-Za-z_]\w*)\s*(?:=|\{|\[)")
not_names = {"if", "for", "while", "switch", "return"}
clashes = []
for area in sorted(os.listdir(root)):
    d = os.path.join(root, area)
    if not os.path.isdir(d) or area == "fuzz":  # each fuzz harness is a program of its own
        continue
    files = sorted(f for f in os.listdir(d) if f.endswith(".cpp"))
    where = collections.defaultdict(set)
    for f in files:
        for line in open(os.path.join(d, f), encoding="utf-8"):
            if not line or line[0] in " \t#/}{)" or line.startswith(("namespace", "using namespace", "TEST", "INSTANTIATE")):
                continue
            for p in (ty, var, fn):
                m = p.match(line)
                if m:
                    name = next(g for g in m.groups() if g)
                    if name not in not_names:
                        where[name].add(f)
                    break
    clashes += [f"tests/{area}: {n} is defined in {', '.join(sorted(fs))}" for n, fs in sorted(where.items()) if len(fs) > 1]
print("\n".join(clashes) if clashes else "no test helper name is defined in two files of an area")
sys.exit(1 if clashes else 0)
