#!/usr/bin/env python3
"""Fails (exit 1) when modules import each other in a circle, between files or between folders.

Usage: import_cycles.py ROOT [ROOT ...]

Each ROOT is checked on its own, in the language of the files under it: a Rust crate's source
folder (`host/src`), a Python package's parent (`producers/python/src`) or a TypeScript source
folder (`producers/node/src`). Go needs no check: the Go compiler refuses import cycles between
packages, and the files of one package do not import each other.

The graph. Every file is a module: `a/b.rs`, `a/b/mod.rs`, `a/b.py`, `a/b/__init__.py`,
`a/b.ts` and `a/b/index.ts` are all `a::b`. An edge A -> B is a path in A's code that names module
B or an item of it:
- Rust: a `use` path, or a path written inline (`super::exec::db`, `$crate::store::Driver`, or a
  name a `use` brought in, such as `store::exec::db` after `use crate::store;`). Comments and
  string literals are skipped; so is every item under `#[cfg(test)]` (tests may reach anywhere),
  and a `#[cfg(test)] mod tests;` file. `pub use` re-exports resolve to the module that defines
  the item, so `use crate::store::ConnectOptions` is an edge to `store::connect`.
- Python: every `import` and `from … import` (those under `if TYPE_CHECKING:` too), read with
  the `ast` module; names re-exported by a package's `__init__` resolve to their module.
- TypeScript: every relative `import … from`, `export … from` and `import(…)`.
A module naming its own descendants (a parent declaring its children) is not an edge.

Two checks, both must hold:
1. Files: no circle of modules (a strongly connected component of the graph).
2. Folders: at every level of the tree, the children of one folder (sub-folders and files alike)
   form no circle, where child X depends on sibling Y when anything inside X names anything
   inside Y. So `config -> worker -> metrics -> broker -> config` is a circle of folders even
   when no two files import each other in a circle.
Each circle is printed with one file-level edge as the witness of each step.
"""
import ast
import os
import re
import sys


# ---------------------------------------------------------------------------------------------
# Rust


def rust_strip(text):
    """The code with comments removed and every string or char literal emptied."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
            continue
        m = re.match(r'b?r(#*)"', text[i : i + 40]) if c in "br" else None
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            i = n if j < 0 else j + len(close)
            out.append('""')
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
            continue
        if c == "'":
            # a char literal ('x', '\n', '\u{1F600}', '\'') or a lifetime ('a)
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", text[i : i + 12], re.S)
            if m:
                i += len(m.group(0))
                out.append("' '")
                continue
        out.append(c)
        i += 1
    return "".join(out)


def item_end(text, i):
    """Index just past the item (or field, or statement) starting at `i`: through its first `;`
    or `,` at its own level, or its balanced `{…}` block; or up to the bracket that closes the
    enclosing one."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "([" or (c == "{" and depth > 0):
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif c in ";," and depth == 0:
            return i + 1
        elif c == "{" and depth == 0:
            level = 0
            while i < len(text):
                level += text[i] == "{"
                level -= text[i] == "}"
                i += 1
                if level == 0:
                    return i
            return i
        i += 1
    return i


CFG_TEST = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*)\)\]")


def drop_test_items(text):
    """The code without its `#[cfg(test)]` items, and the names of `#[cfg(test)] mod NAME;`."""
    test_mods = []
    while True:
        m = CFG_TEST.search(text)
        if not m:
            return text, test_mods
        start = m.end()
        while True:  # further attributes on the same item
            a = re.match(r"\s*#\[", text[start:])
            if not a:
                break
            start = text.index("]", start) + 1
        end = item_end(text, start)
        item = text[start:end]
        mod = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", item)
        if mod:
            test_mods.append(mod.group(1))
        text = text[: m.start()] + " " + text[end:]


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [(['a','b'], 'b'), (['a','c','d'], 'd'), (['a','c','e'], 'f')]."""
    tree = " ".join(tree.split())
    brace = tree.find("{")
    if brace < 0:
        path, _, alias = tree.partition(" as ")
        segs = [p.strip() for p in path.split("::") if p.strip()]
        return [(segs, alias.strip() or (segs[-1] if segs else ""))]
    prefix = [p.strip() for p in tree[:brace].split("::") if p.strip()]
    body, depth, parts, cur = tree[brace + 1 : tree.rfind("}")], 0, [], ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip():
            for sub, alias in expand_use(part):
                if sub == ["self"]:  # `a::{self, b}` names `a` itself
                    out.append((prefix, prefix[-1] if prefix else ""))
                else:
                    out.append((prefix + sub, alias))
    return out


def rust_graph(root):
    def module_of(path):
        rel = os.path.relpath(path, root)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main"):
            rel = rel[:-1]
        return tuple(rel)

    sources, test_only, files = {}, set(), {}
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                module = module_of(path)
                text, test_mods = drop_test_items(rust_strip(open(path, encoding="utf-8").read()))
                sources[module] = text
                files[module] = os.path.relpath(path, root)
                test_only.update(module + (t,) for t in test_mods)

    def is_test(module):
        return any(module[: len(t)] == t for t in test_only)

    sources = {m: t for m, t in sources.items() if not is_test(m)}
    modules = set(sources)

    def absolute(module, path):
        """The path as segments from the crate root, or None for an external crate."""
        if not path:
            return None
        head = path[0]
        if head in ("crate", "$crate"):
            return list(path[1:])
        if head == "self":
            return list(module) + list(path[1:])
        if head == "super":
            base = list(module)
            while path and path[0] == "super":
                base, path = base[:-1], path[1:]
            return base + list(path)
        child = tuple(module) + (head,)
        if child in modules:  # a child module used by name (`use gate::Gate`)
            return list(child) + list(path[1:])
        if (head,) in modules and module == ():
            return list(path)  # a crate-root module named from the crate root
        return None

    reexports = {}  # (module, name) -> absolute path of what it re-exports
    uses = {}  # module -> [(absolute path, alias)]
    for module, text in sources.items():
        uses[module] = []
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
            for path, alias in expand_use(m.group(2)):
                full = absolute(module, path)
                if full is None or path[-1] == "*":
                    continue
                uses[module].append((full, alias))
                if m.group(1):
                    reexports[(tuple(module), alias)] = full

    def target(path, seen=0):
        """The module an absolute path lands in: its longest module prefix, through re-exports."""
        for n in range(len(path), -1, -1):
            prefix = tuple(path[:n])
            if prefix in modules:
                rest = path[n:]
                if rest and (prefix, rest[0]) in reexports and seen < 10:
                    return target(reexports[(prefix, rest[0])] + list(rest[1:]), seen + 1)
                return prefix
        return None

    edges = {m: {} for m in modules}  # module -> {target: the path that names it}
    for module, text in sources.items():
        paths = []
        aliases = {}
        for full, alias in uses[module]:
            paths.append(full)
            if alias and alias != "_":
                aliases[alias] = full
        body = re.sub(r"\buse\s+[^;]+;", " ", text)
        for m in re.finditer(r"(?<![\w:$])(\$?\w+)((?:\s*::\s*\w+)+)", body):
            head = m.group(1)
            rest = [s.strip() for s in m.group(2).split("::") if s.strip()]
            if head in ("crate", "$crate", "super", "self"):
                full = absolute(module, [head] + rest)
            elif head in aliases:
                full = aliases[head] + rest
            else:
                full = absolute(module, [head] + rest) if (tuple(module) + (head,)) in modules else None
            if full is not None:
                paths.append(full)
        for full in paths:
            to = target(full)
            # a module reaching into its own children (or itself) is not an import edge
            if to is None or to[: len(module)] == module:
                continue
            edges[module].setdefault(to, "::".join(full))
    return modules, edges, files


# ---------------------------------------------------------------------------------------------
# Python


def python_graph(root):
    def module_of(path):
        rel = os.path.relpath(path, root)[:-3].split(os.sep)
        if rel[-1] == "__init__":
            rel = rel[:-1]
        return tuple(rel)

    trees, files = {}, {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".venv", "node_modules")]
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                module = module_of(path)
                trees[module] = (ast.parse(open(path, encoding="utf-8").read(), path), name == "__init__.py")
                files[module] = os.path.relpath(path, root)
    modules = set(trees)

    def imports(module, is_package):
        """(absolute dotted path, bound name or None) for every import in the module."""
        tree, _ = trees[module]
        package = module if is_package else module[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield tuple(a.name.split(".")), None
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - (node.level - 1)] if node.level else ()
                base = base + tuple(node.module.split(".")) if node.module else base
                for a in node.names:
                    yield base + (a.name,), a.asname or a.name

    reexports = {}
    for module, (_, is_package) in trees.items():
        if is_package:
            for full, bound in imports(module, True):
                if bound:
                    reexports[(module, bound)] = full

    def target(path, seen=0):
        for n in range(len(path), 0, -1):
            prefix = tuple(path[:n])
            if prefix in modules:
                rest = path[n:]
                if rest and (prefix, rest[0]) in reexports and seen < 10:
                    return target(reexports[(prefix, rest[0])] + rest[1:], seen + 1)
                return prefix
        return None

    edges = {m: {} for m in modules}
    for module, (_, is_package) in trees.items():
        for full, _ in imports(module, is_package):
            to = target(full)
            if to is None or to[: len(module)] == module:
                continue
            edges[module].setdefault(to, ".".join(full))
    return modules, edges, files


# ---------------------------------------------------------------------------------------------
# TypeScript


def typescript_graph(root):
    def module_of(rel):
        parts = rel.split(os.sep)
        parts[-1] = re.sub(r"\.(ts|tsx|js|mjs)$", "", parts[-1])
        if parts[-1] == "index":
            parts = parts[:-1]
        return tuple(parts)

    texts, files = {}, {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "node_modules"]
        for name in sorted(names):
            if re.search(r"(?<!\.d)\.tsx?$", name):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                texts[module_of(rel)] = (rel, open(path, encoding="utf-8").read())
                files[module_of(rel)] = rel
    modules = set(texts)
    edges = {m: {} for m in modules}
    pattern = re.compile(r"""^\s*(?:import|export)\b[^'";]*?\bfrom\s*['"](\.[^'"]+)['"]|\bimport\s*\(\s*['"](\.[^'"]+)['"]""", re.M)
    for module, (rel, text) in texts.items():
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        for m in pattern.finditer(text):
            spec = m.group(1) or m.group(2)
            to = module_of(os.path.normpath(os.path.join(os.path.dirname(rel), spec)))
            if to in modules and to[: len(module)] != module:
                edges[module].setdefault(to, spec)
    return modules, edges, files


# ---------------------------------------------------------------------------------------------
# cycles


def strongly_connected(nodes, succ):
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ(root))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            pushed = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ(w)))))
                    pushed = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def a_cycle(comp, succ):
    """One shortest circle through the smallest member of a component."""
    members, start = set(comp), min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ(v)):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp + [comp[0]]


def name(m):
    return "::".join(m) or "the root"


def cycles(modules, edges, files):
    """Printable lines, one per circle of files or of folders."""
    lines = []
    for comp in strongly_connected(modules, lambda v: edges[v]):
        circle = a_cycle(comp, lambda v: edges[v])
        more = f" ({len(comp)} files in one tangle)" if len(comp) > len(circle) - 1 else ""
        lines.append("file cycle: " + " -> ".join(files.get(m, name(m)) for m in circle) + more)
    # folder level: siblings under each parent, with one witnessing file edge per sibling edge
    siblings = {}  # parent -> {child: {sibling: (from module, to module, path)}}
    for a, outs in edges.items():
        for b, path in outs.items():
            c = 0
            while c < min(len(a), len(b)) and a[c] == b[c]:
                c += 1
            if c == len(a) or c == len(b):
                continue  # one is inside the other: a parent and its own children
            x, y = a[: c + 1], b[: c + 1]
            siblings.setdefault(a[:c], {}).setdefault(x, {}).setdefault(y, (a, b, path))
    parents = {m[:n] for m in modules for n in range(len(m))}
    for parent in sorted(siblings):
        graph = siblings[parent]
        nodes = set(graph) | {y for outs in graph.values() for y in outs}
        succ = lambda v: graph.get(v, {})
        for comp in strongly_connected(nodes, succ):
            if not any(m in parents for m in comp):
                continue  # files only: the file check above reported it
            circle = a_cycle(comp, succ)
            steps = []
            for x, y in zip(circle, circle[1:]):
                a, b, path = graph[x][y]
                steps.append(f"    {name(x)} -> {name(y)}: {files.get(a, name(a))} names {path}")
            lines.append(
                f"folder cycle in {name(parent)}: "
                + " -> ".join(m[-1] for m in circle)
                + (f" ({len(comp)} in one tangle: {', '.join(m[-1] for m in comp)})" if len(comp) > len(circle) - 1 else "")
                + "\n"
                + "\n".join(steps)
            )
    return lines


def graph_of(root):
    """The module graph of one root, in the language of the files under it."""
    counts = {"rust": 0, "python": 0, "typescript": 0}
    for _, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("node_modules", "__pycache__", ".venv", "target")]
        for n in names:
            counts["rust"] += n.endswith(".rs")
            counts["python"] += n.endswith(".py")
            counts["typescript"] += bool(re.search(r"(?<!\.d)\.tsx?$", n))
    language = max(counts, key=counts.get)
    if counts[language] == 0:
        sys.exit(f"import_cycles: no Rust, Python or TypeScript files under {root}")
    return language, {"rust": rust_graph, "python": python_graph, "typescript": typescript_graph}[language](root)


def main(roots):
    failed = False
    for root in roots:
        if not os.path.isdir(root):
            sys.exit(f"import_cycles: {root} is not a folder")
        language, (modules, edges, files) = graph_of(root)
        found = cycles(modules, edges, files)
        for line in found:
            print(f"{root}: {line}")
        if found:
            failed = True
        else:
            count = sum(len(v) for v in edges.values())
            print(f"{root}: no import cycles among {len(modules)} {language} modules ({count} edges), files or folders")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
