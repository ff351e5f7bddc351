"""Install the built wheel beside the frameworks an environment already holds, and fail if any
package there would change or did change.

    python tools/check_install.py ENV_PYTHON WHEEL EXTRAS

1. pip's plan: `ENV_PYTHON -m pip install --dry-run --report` of `keras-attn[EXTRAS]` from
   WHEEL. Printed (what it would install, what it would replace); a plan replacing any package
   already installed, keras-attn itself aside, fails here, before anything is installed.
2. The install itself, with dependencies (pip resolves as a user's pip does).
3. `pip list` before and after: every package installed before, keras-attn aside, must still
   be there at the same version.

Exit status 1 on a change, naming each package with its two versions (`make test-oldest` runs it
on the oldest and the newest supported environments).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

OURS = "keras-attn"


def normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python):
    """`{normalized name: version}` of the environment of `python`."""
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {normal(p["name"]): p["version"] for p in json.loads(out)}


def plan(python, requirement):
    """pip's `--dry-run --report` for `requirement`: `[(name, version)]` it would install."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        subprocess.run(
            [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report]
            + ["--disable-pip-version-check", requirement],
            check=True,
        )
        with open(report) as f:
            items = json.load(f)["install"]
    return [(normal(i["metadata"]["name"]), i["metadata"]["version"]) for i in items]


def changes(before, after):
    """`["name old -> new" | "name old -> removed"]` for the packages of `before` (ours aside)."""
    return [
        f"{name} {version} -> {after.get(name, 'removed')}"
        for name, version in sorted(before.items())
        if name != OURS and after.get(name) != version
    ]


def main(argv):
    python, wheel, extras = argv
    requirement = f"{OURS}[{extras}] @ file://{os.path.abspath(wheel)}"
    before = installed(python)
    tf = before.get("tensorflow", "none")
    print(f"{python}: TensorFlow {tf}, Keras {before.get('keras', 'none')}; {requirement}")
    planned = plan(python, requirement)
    new = [f"{n} {v}" for n, v in planned if n not in before]
    replaced = [f"{n} {before[n]} -> {v}" for n, v in planned if n in before and n != OURS]
    print(f"  pip's plan: install {', '.join(new) or 'nothing'}")
    print(f"  pip's plan: replace {', '.join(replaced) or 'nothing'}")
    if replaced:
        print(f"  FAILED: installing {OURS}[{extras}] would replace installed packages")
        return 1
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
        check=True,
    )
    changed = changes(before, installed(python))
    if changed:
        print(f"  FAILED: installing {OURS}[{extras}] changed {', '.join(changed)}")
        return 1
    checked = len([name for name in before if name != OURS])
    print(f"  installed; no package of the environment changed ({checked} checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
