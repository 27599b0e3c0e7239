#!/usr/bin/env python3
"""Fails (exit 1) when README.md or a page under docs/ names a repository path that does not exist,
links to a page or anchor that does not exist, or outgrows its size.

What is checked, in README.md and every docs/**/*.md (fenced code blocks are left out):

- Markdown links `[text](target)` that are not URLs: the target, relative to the page, must
  exist, and a `#fragment` must be a heading of the target page (GitHub's slugs) or an
  `<a id="…">` in it. A bare `#fragment` is looked up in the page itself.
- docs/README.md, the index, links to every other page under docs/; no page under docs/ is over
  300 lines, and README.md is at most 12 KB.
- Inline code that names a repository path. Each whitespace-separated word of a backtick span is
  a candidate (so `bash bench/throughput.sh` names `bench/throughput.sh`) when it ends in a known
  file extension, or contains a `/` and starts with a top-level entry of the repository
  (`host/…`, `docs/…`, `../deploy/…`). Such a word must exist relative to the repository root,
  to the page's folder, or to a base folder the page declares with a comment
  `<!-- doc-paths: base host/src -->` (for a code map that names files from one root). A bare
  file name (`mod.rs`) resolves when a file of that name exists anywhere in the repository.
  A glob (`host/fuzz/seeds/*`) resolves when anything matches it.

Left alone: URLs, absolute paths (`/etc/outboxd/…`, `/tmp/…`: not repository paths), `~/…` and
`./…` (the reader's home and working directory), paths
that lead out of the repository (`../shared/…` from the root), a bare extension (`.wasm`),
words with a placeholder (`<name>`, `NAME`, `…`, `{table}`), words with `:`, `=`, `@` or `$`
(URLs, settings, WIT names, variables), and the build outputs and installed files of ALLOWED.

Usage: doc_paths.py [REPO_ROOT] (default: the current directory). Prints each missing path as
`page:line: what`, then a count.
"""
import fnmatch
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")

# Paths that are not in the repository by design, each with its reason. A word starting with one
# of these prefixes is not checked.
ALLOWED = {
    "target/": "build output (cargo's target dir: binaries, the demo's database)",
    "plugins/out/": "build output of `make plugins` (the .wasm components)",
    "plugins/target": "build output of the guest workspaces",
    ".toolchains/": "installed by `make plugins` (Python and JavaScript toolchains, tansu)",
    "host/fuzz/corpus/": "written by `make fuzz` runs (ignored by git)",
    "host/fuzz/artifacts/": "written by `make fuzz` when a target crashes (ignored by git)",
    "node_modules/": "installed by npm in a plugin project",
    "*.wasm": "plugin components are built (`make plugins`, a plugin project's `make`)",
    ".venv/": "installed by a Python plugin project's first `make`",
}

EXTENSIONS = (
    ".rs", ".md", ".toml", ".py", ".sh", ".wit", ".proto", ".sql", ".json", ".wasm", ".go",
    ".ts", ".js", ".yml", ".yaml", ".txt", ".service", ".lock", ".png", ".tmpl", ".dict",
)
SKIP_DIRS = {".git", "target", "node_modules", ".toolchains", "out", ".venv", "__pycache__"}


def repo_files():
    names, paths = set(), []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in files:
            names.add(name)
            paths.append(os.path.relpath(os.path.join(dirpath, name), root))
    return names, paths


BASENAMES, ALL_PATHS = repo_files()
TOP_LEVEL = set(os.listdir(root)) - {".git"}


def pages():
    found = [os.path.join(root, "README.md")]
    for dirpath, _, files in os.walk(os.path.join(root, "docs")):
        found += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".md")]
    return found


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_fences(path):
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


ANCHOR_CACHE = {}


def anchors(path):
    if path not in ANCHOR_CACHE:
        found, seen = set(), {}
        for _, line in lines_outside_fences(path):
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(re.findall(r'<a\s+(?:id|name)="([^"]+)"', line))
        ANCHOR_CACHE[path] = found
    return ANCHOR_CACHE[path]


def allowed(word):
    for prefix in ALLOWED:
        if prefix.startswith("*"):
            if fnmatch.fnmatch(word, prefix):
                return True
        elif word.startswith(prefix) or ("/" + prefix) in word:
            return True
    return False


def exists(word, bases):
    word = word.rstrip("/")
    for base in bases:
        candidate = os.path.normpath(os.path.join(base, word))
        if not candidate.startswith(root + os.sep) and candidate != root:
            return True  # outside the repository: not a repository path
        if any(ch in word for ch in "*?["):
            rel = os.path.relpath(candidate, root)
            if any(fnmatch.fnmatch(p, rel) or fnmatch.fnmatch(p, rel + "/*") for p in ALL_PATHS):
                return True
        elif os.path.exists(candidate):
            return True
    return "/" not in word and word in BASENAMES


def path_words(span):
    for word in span.split():
        word = word.strip("(),;'\"")
        if not word or word.startswith(("/", "~", "-", "./")) or "://" in word:
            continue
        if any(ch in word for ch in "<>…{}:=@$%|") or "NAME" in word or "TARGET" in word:
            continue
        if word.endswith(EXTENSIONS) and word not in EXTENSIONS:
            yield word
        elif "/" in word:
            first = word.split("/")[0]
            if first in TOP_LEVEL or first == "..":
                yield word


def check(page):
    problems = []
    page_dir = os.path.dirname(page)
    bases = [root, page_dir]
    for _, line in lines_outside_fences(page):
        for m in re.finditer(r"<!--\s*doc-paths:\s*base\s+(\S+)\s*-->", line):
            bases.append(os.path.join(root, m.group(1)))
    rel_page = os.path.relpath(page, root)
    for number, line in lines_outside_fences(page):
        for m in re.finditer(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)", line):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, fragment = target.partition("#")
            target_path = os.path.normpath(os.path.join(page_dir, file_part)) if file_part else page
            if not os.path.exists(target_path):
                problems.append(f"{rel_page}:{number}: link to a missing path `{target}`")
            elif fragment and target_path.endswith(".md") and fragment not in anchors(target_path):
                problems.append(f"{rel_page}:{number}: link to a missing anchor `{target}`")
        code = re.sub(r"\[[^\]]*\]\([^)]*\)", "", line)
        for span in re.findall(r"``?([^`]+)``?", code):
            for word in path_words(span):
                if not allowed(word) and not exists(word, bases):
                    problems.append(f"{rel_page}:{number}: names a missing path `{word}`")
    return problems


def unlisted(checked):
    """The docs pages that docs/README.md, the index, does not link to."""
    index = os.path.join(root, "docs", "README.md")
    if not os.path.exists(index):
        return ["docs/README.md: the index of the docs pages is missing"]
    linked = set()
    for _, line in lines_outside_fences(index):
        for target in re.findall(r"\]\(([^)#\s]+)", line):
            linked.add(os.path.normpath(os.path.join(os.path.dirname(index), target)))
    docs_dir = os.path.join(root, "docs") + os.sep
    return [
        f"docs/README.md: does not list {os.path.relpath(page, root)}"
        for page in checked
        if page.startswith(docs_dir) and page != index and page not in linked
    ]


MAX_PAGE_LINES = 300
MAX_README_BYTES = 12 * 1024


def too_long(checked):
    """Pages over their size: a docs page over 300 lines, README.md over 12 KB."""
    problems = []
    for page in checked:
        rel = os.path.relpath(page, root)
        if rel == "README.md":
            size = os.path.getsize(page)
            if size > MAX_README_BYTES:
                problems.append(f"README.md: {size} bytes, more than {MAX_README_BYTES}")
        else:
            lines = sum(1 for _ in open(page, encoding="utf-8"))
            if lines > MAX_PAGE_LINES:
                problems.append(f"{rel}: {lines} lines, more than {MAX_PAGE_LINES}")
    return problems


def main():
    problems = []
    checked = pages()
    for page in checked:
        problems += check(page)
    problems += unlisted(checked)
    problems += too_long(checked)
    for problem in problems:
        print(problem)
    print(f"doc_paths: {len(checked)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
