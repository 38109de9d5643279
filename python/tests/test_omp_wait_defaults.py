"""`import rlx` gives libgomp a short spin before idle threads block (python/rlx/__init__.py)
unless the user chose a wait policy; the variable must be in place before libgomp loads, so each
case runs in a fresh interpreter."""

import os
import subprocess
import sys

import rlx


def spin_count_after_import(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = "import os, rlx; print(os.environ.get('GOMP_SPINCOUNT', '(unset)'))"
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def test_default_when_the_user_chose_nothing():
    assert rlx._DEFAULT_GOMP_SPINCOUNT == "300"
    assert spin_count_after_import() == "300"


def test_user_choices_win():
    assert spin_count_after_import(GOMP_SPINCOUNT="77") == "77"
    assert spin_count_after_import(OMP_WAIT_POLICY="active") == "(unset)"
    assert spin_count_after_import(OMP_WAIT_POLICY="passive") == "(unset)"
