#!/usr/bin/env python3
"""Fails (exit 1) when the modules of a crate import each other in a circle.

Every file under the source root is one module (`a/b.rs` and `a/b/mod.rs` are `a::b`). An edge
A -> B is a path in A's code (a `use`, or a path written inline such as `super::exec::db` or
`$crate::store::exec::Driver`; comments skipped) that names module B or an item of it.
Items re-exported by a `pub use` resolve to the module that defines them, so `use
crate::store::ConnectOptions` is an edge to `store::connect` when `store` re-exports it. A module's
`#[cfg(test)] mod tests` body is left out (tests may reach anywhere).

Usage: import_cycles.py [SRC_ROOT] (default host/src). Prints each cycle found.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "host/src"

def module_of(path):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)

def strip(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # a trailing `#[cfg(test)] mod tests { … }` (or `mod tests;`) is not the module's code
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s*)?mod\s+\w+\s*[{;]", text)
    if m:
        text = text[: m.start()]
    return text

sources = {}
for dirpath, _, files in os.walk(root):
    for name in files:
        if name.endswith(".rs"):
            path = os.path.join(dirpath, name)
            sources[module_of(path)] = strip(open(path, encoding="utf-8").read())
modules = set(sources)

def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [['a','b'], ['a','c','d'], ['a','c','e']]."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        path = tree.split(" as ")[0].strip()
        return [[p for p in path.split("::") if p]]
    prefix = [p for p in tree[:brace].split("::") if p]
    body, depth, parts, cur = tree[brace + 1 : tree.rfind("}")], 0, [], ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""; continue
        depth += ch == "{"; depth -= ch == "}"; cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip():
            out += [prefix + sub for sub in expand_use(part)]
    return out

def absolute(module, path):
    """The path as segments from the crate root, or None for an external crate."""
    if not path:
        return None
    head = path[0]
    if head in ("crate", "$crate"):
        return path[1:]
    if head == "self":
        return list(module) + path[1:]
    if head == "super":
        base = list(module)
        while path and path[0] == "super":
            base, path = base[:-1], path[1:]
        return base + path
    if (head,) in modules:
        return path  # a crate-root module named without `crate::` (2015 style)
    child = tuple(module) + (head,)
    if child in modules:  # a child module used by name (`use gate::Gate`)
        return list(child) + path[1:]
    return None

# re-exports: (module, name) -> absolute path of what it re-exports
reexports = {}
for module, text in sources.items():
    for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
        for path in expand_use(m.group(1)):
            full = absolute(module, path)
            if full:
                reexports[(module, path[-1])] = full

def target(path, seen=0):
    """The module an absolute path lands in: its longest module prefix, through re-exports."""
    for n in range(len(path), -1, -1):
        prefix = tuple(path[:n])
        if prefix in modules:
            rest = path[n:]
            if rest and (prefix, rest[0]) in reexports and seen < 10:
                return target(reexports[(prefix, rest[0])] + rest[1:], seen + 1)
            return prefix
    return None

edges = {m: set() for m in modules}
for module, text in sources.items():
    # re-export lines are aliases, not uses of the module that makes them
    body = re.sub(r"pub(?:\([^)]*\))?\s+use\s+[^;]+;", "", text)
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", body):
        paths += expand_use(m.group(1))
    body = re.sub(r"\buse\s+[^;]+;", "", body)
    for m in re.finditer(r"(?<![\w:])((?:\$?crate|super|self)(?:::\w+)+)", body):
        paths.append(m.group(1).split("::"))
    for path in paths:
        full = absolute(module, path)
        if full is None:
            continue
        to = target(full)
        # a module reaching into its own children (or itself) is not an import edge
        if to is None or to[: len(module)] == module:
            continue
        edges[module].add(to)

# cycles: strongly connected components with more than one module (Tarjan)
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(comp)
for v in sorted(modules):
    if v not in index:
        visit(v)

def name(m):
    return "::".join(m) or "crate"

def a_cycle(comp):
    members = set(comp)
    start = min(comp)
    # shortest path back to start, breadth first
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v; nxt.append(w)
        frontier = nxt
    return comp

for comp in sccs:
    print("import cycle: " + " -> ".join(name(m) for m in a_cycle(comp)),
          f"({len(comp)} modules: {', '.join(sorted(name(m) for m in comp))})")
if sccs:
    sys.exit(1)
print(f"no import cycles among {len(modules)} modules under {root}")
