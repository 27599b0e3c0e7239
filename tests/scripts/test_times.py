#!/usr/bin/env python3
"""Prints where a nextest run spent its time, from its JUnit file: each test binary's total
(the sum of its tests' times) and the slowest tests, so a slowdown shows in the log the day it
lands.

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

binaries = []
tests = []
for suite in root.iter("testsuite"):
    name = suite.get("name", "?")
    cases = list(suite.iter("testcase"))
    total = sum(float(case.get("time", 0)) for case in cases)
    binaries.append((total, name, len(cases)))
    tests.extend((float(case.get("time", 0)), f"{name} {case.get('name')}") for case in cases)

print(f"\ntest time per binary (sum of its tests' seconds; the run's wall clock: {float(root.get('time', 0)):.1f} s)")
for total, name, count in sorted(binaries, reverse=True):
    print(f"  {total:8.1f}  {count:4d} tests  {name}")
print(f"\nslowest {slowest} tests (seconds)")
for seconds, name in sorted(tests, reverse=True)[:slowest]:
    print(f"  {seconds:8.1f}  {name}")
