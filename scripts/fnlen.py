#!/usr/bin/env python3
"""Every product function (crates/*/src, test modules and tests/ left out) longer than
LIMIT lines (default 70), longest first, and how many there are: the function-length
report of ARCHITECTURE.md's "Small functions". Usage: scripts/fnlen.py [LIMIT]"""
import os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 70
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)')

def strip(line):
    """The line without strings and line comments (crudely: enough to count braces)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]

def skip_item(lines, i):
    """The index after the item that starts at line i (a #[cfg(test)] module)."""
    d, started = 0, False
    for j in range(i, len(lines)):
        t = strip(lines[j])
        d += t.count("{") - t.count("}")
        started |= "{" in t
        if started and d <= 0 or not started and t.strip().endswith(";"):
            return j + 1
    return len(lines)

def body_len(lines, i):
    """Lines of the function starting at line i (None: a declaration only)."""
    d, started = 0, False
    for j in range(i, len(lines)):
        t = strip(lines[j])
        if not started and "{" not in t and t.strip().endswith(";"):
            return None
        d += t.count("{") - t.count("}")
        started |= "{" in t
        if started and d <= 0:
            return j - i + 1
    return None

def scan(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if re.match(r'^\s*#\[cfg\(test\)\]', lines[i]):
            i = skip_item(lines, i + 1)
            continue
        m = FN.match(lines[i])
        if m:
            n = body_len(lines, i)
            if n:
                out.append((n, f"{os.path.relpath(path, ROOT)}:{i + 1}:{m.group(7)}"))
        i += 1
    return out

res = []
for dp, _, files in os.walk(os.path.join(ROOT, "crates")):
    parts = dp.split(os.sep)
    if "tests" in parts or "benches" in parts or "target" in parts or "src" not in parts:
        continue
    res += [r for f in files if f.endswith(".rs") and f != "tests.rs" for r in scan(os.path.join(dp, f))]
res.sort(reverse=True)
over = [r for r in res if r[0] > LIMIT]
for n, where in over:
    print(f"{n:5d} {where}")
print(f"functions: {len(res)}; over {LIMIT} lines: {len(over)}; longest: {res[0][0] if res else 0}")
