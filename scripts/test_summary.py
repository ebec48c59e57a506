#!/usr/bin/env python3
"""scripts/test.sh's last line: `N passed, M failed, K skipped (<label> k, ...)`, from ctest's JUnit file.

ctest's own "100% tests passed" counts a skipped test as passed; here a skip is counted apart and named by its
test's label. A test that ran and failed, timed out, or did not run for any reason but a declared skip (a
missing executable, a failed fixture) counts as failed. A test declaring SKIP_REGULAR_EXPRESSION fails the
summary: a matching line would make CTest report a failing run as skipped (tests skip by exit code 77).
Usage: test_summary.py <junit.xml> <ctest --show-only=json-v1 output>   Exit: 1 if anything failed.
"""
import collections
import json
import sys
import xml.etree.ElementTree as ET


def main(junit_path, tests_json_path):
    labels, masking = {}, []
    for test in json.load(open(tests_json_path))["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        labels[test["name"]] = [l for l in props.get("LABELS", []) if l != "long"] or ["unlabelled"]
        if "SKIP_REGULAR_EXPRESSION" in props:
            masking.append(test["name"])
    passed, failed, skipped = 0, [], collections.Counter()
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        name, status = case.get("name"), case.get("status")
        if status == "run":
            passed += 1
        elif status == "notrun" and case.find("skipped") is not None:
            skipped[labels.get(name, ["unlabelled"])[0]] += 1
        else:
            failed.append(name)
    for name in masking:
        print(f"test.sh: FAIL: {name} declares SKIP_REGULAR_EXPRESSION (a matching line hides a failure; "
              "skip by exit code 77)")
    by_label = ", ".join(f"{label} {n}" for label, n in sorted(skipped.items()))
    print(f"test.sh: {passed} passed, {len(failed)} failed, {sum(skipped.values())} skipped"
          + (f" ({by_label})" if by_label else "") + (f"; failed: {' '.join(failed)}" if failed else ""))
    return 1 if failed or masking else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
