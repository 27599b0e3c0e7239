#!/usr/bin/env python3
"""Prints where a nextest run spent its time, from its JUnit file: the total of each test file
(the sum of its tests' times; a file of the integration binary `tests/main.rs` is its first
module, e.g. `integration::conformance`) and the slowest tests, so a slowdown shows in the log
the day it lands.

Usage: test_times.py [JUNIT_XML] (default target/nextest/default/junit.xml) [SLOWEST (10)]
"""
import sys
import xml.etree.ElementTree as ET

path = sys.argv[1] if len(sys.argv) > 1 else "target/nextest/default/junit.xml"
slowest = int(sys.argv[2]) if len(sys.argv) > 2 else 10
try:
    root = ET.parse(path).getroot()
except (OSError, ET.ParseError) as error:
    sys.exit(f"test_times.py: cannot read {path}: {error}")

files = {}
tests = []
for suite in root.iter("testsuite"):
    binary = suite.get("name", "?")
    for case in suite.iter("testcase"):
        seconds, test = float(case.get("time", 0)), case.get("name", "?")
        file = f"{binary}::{test.split('::')[0]}" if binary.endswith("::integration") else binary
        total, count = files.get(file, (0.0, 0))
        files[file] = (total + seconds, count + 1)
        tests.append((seconds, f"{binary} {test}"))

print(f"\ntest time per file (sum of its tests' seconds; the run's wall clock: {float(root.get('time', 0)):.1f} s)")
for name, (total, count) in sorted(files.items(), key=lambda item: -item[1][0]):
    print(f"  {total:8.1f}  {count:4d} tests  {name}")
print(f"\nslowest {slowest} tests (seconds)")
for seconds, name in sorted(tests, reverse=True)[:slowest]:
    print(f"  {seconds:8.1f}  {name}")
