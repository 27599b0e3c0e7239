#!/usr/bin/env python3
"""Shows that `import_cycles.py` fails where it must: runs it over the trees in
tests/fixtures/import_cycles and checks each verdict and the circle it names. Exit 1 on any
mismatch. Run by `make test-imports` before the check of the real trees."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, "..", "fixtures", "import_cycles")
script = os.path.join(here, "import_cycles.py")

# (tree, expected exit code, lines the output must contain)
CASES = [
    ("rust_folder_cycle/src", 1, ["folder cycle in the root: a -> b -> a", "b/z.rs names a::A"]),
    ("rust_hidden_super/src", 1, ["file cycle: bench/one.rs -> bench/two.rs -> bench/one.rs"]),
    ("rust_clean/src", 0, ["no import cycles among 5 rust modules (3 edges)"]),
    ("python_cycle", 1, ["file cycle: pkg/a.py -> pkg/b.py -> pkg/a.py"]),
    ("typescript_cycle", 1, ["file cycle: a.ts -> b.ts -> a.ts"]),
]

failed = 0
for tree, code, wanted in CASES:
    run = subprocess.run([sys.executable, script, os.path.join(fixtures, tree)], capture_output=True, text=True)
    out = run.stdout + run.stderr
    missing = [line for line in wanted if line not in out]
    if run.returncode != code or missing:
        failed += 1
        print(f"FAIL {tree}: exit {run.returncode} (want {code}), missing {missing}\n{out}")
    else:
        print(f"ok   {tree}: exit {code}")
sys.exit(1 if failed else 0)
