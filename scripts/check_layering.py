#!/usr/bin/env python3
"""Include-layering check: a file of one layer may include only rlx headers of the layers its
library links (directly or through another library), never a higher layer's.

The layers and what each may include are stated below; they mirror the target_link_libraries
graph of CMakeLists.txt and the table in docs/architecture.md (change all three together).
tools/, tests/, fuzz/, bench/, examples/ and python/src/ sit on top and may include anything.

Checked: every tracked .h/.cc/.def under include/rlx/ and src/, and every `#include "rlx/..."`
and every quoted relative include that resolves to a file of another layer (or of tools/,
tests/, ...). Exit status 1 with one line per violation: file:line: the include and the rule.
Usage: python3 scripts/check_layering.py [FILE ...]   (default: every tracked file)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# Layer -> the layers it may include (itself implied): the libraries it links, directly or
# transitively. Bottom first: ir < opt < autodiff, runtime < backends (cpu, pjrt) < train;
# ir < io < train, models < serve; runtime, io < import; cpu and pjrt are siblings and may not include each other.
ALLOWED: dict[str, set[str]] = {
    "ir": set(),
    "opt": {"ir"},
    "autodiff": {"opt", "ir"},
    "runtime": {"opt", "ir"},
    "cpu": {"runtime", "opt", "ir"},
    "pjrt": {"runtime", "opt", "ir"},
    "io": {"ir"},
    "train": {"cpu", "pjrt", "runtime", "autodiff", "opt", "io", "ir"},
    # rlx_models links io and backends; rlx_model_graphs (encoder_block) only ir.
    "models": {"cpu", "pjrt", "runtime", "opt", "io", "ir"},
    "model_graphs": {"ir"},
    # rlx_import (ONNX) links rlx_runtime and rlx_io.
    "import": {"runtime", "opt", "io", "ir"},
    # rlx_serve links rlx_models (and through it io and the backends).
    "serve": {"models", "cpu", "pjrt", "runtime", "opt", "io", "ir"},
}

# Files of rlx_model_graphs (a library of the models layer that links only rlx_ir).
MODEL_GRAPHS = {"include/rlx/models/encoder_block.h", "src/models/encoder_block.cc"}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](rlx/[^>"]+)[>"]')
QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of_header(header: str) -> str | None:
    """The layer of an rlx header given as included ("rlx/ir/graph.h" -> "ir")."""
    parts = header.split("/")
    if len(parts) < 3:
        return None
    if parts[1] == "backends":
        return parts[2] if len(parts) > 3 else None
    if "include/" + header in MODEL_GRAPHS:
        return "model_graphs"
    return parts[1]


def layer_of_file(path: str) -> str | None:
    """The layer a tracked file belongs to, or None for files on top (tools, tests, ...)."""
    if path in MODEL_GRAPHS:
        return "model_graphs"
    parts = path.split("/")
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "rlx":
        return layer_of_header("/".join(parts[1:]))
    if parts[0] == "src" and len(parts) > 2:
        if parts[1] == "backends":
            return parts[2] if len(parts) > 3 else None
        return parts[1]
    return None


def check(files: list[str]) -> list[str]:
    """One message per upward include in `files` (paths relative to the repository root)."""
    errors = []
    for path in files:
        layer = layer_of_file(path)
        if layer is None:
            continue
        if layer not in ALLOWED:
            errors.append(f"{path}: layer '{layer}' is not in the layering table of "
                          f"scripts/check_layering.py")
            continue
        allowed = ALLOWED[layer] | {layer}
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if m:
                target = layer_of_header(m.group(1))
            else:
                # A relative include ("../opt/x.h") reaching into another layer's files.
                m = QUOTED.match(line)
                if not m:
                    continue
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                target = layer_of_file(resolved) if os.path.exists(resolved) else None
                if target is None and os.path.exists(resolved):
                    target = "top"  # tools/, tests/, ...
            if target is None or target in allowed:
                continue
            errors.append(
                f"{path}:{number}: #include \"{m.group(1)}\": layer '{layer}' may not include "
                f"layer '{target}' (it may include: {', '.join(sorted(allowed))})")
    return errors


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    if len(sys.argv) > 1:
        files = [os.path.relpath(Path(f).resolve(), root) for f in sys.argv[1:]]
    else:
        out = subprocess.run(["git", "ls-files", "include", "src"], cwd=root, check=True,
                             capture_output=True, text=True).stdout
        files = [f for f in out.splitlines() if f.endswith((".h", ".cc", ".def"))]
    os.chdir(root)
    errors = check(files)
    for e in errors:
        print(e)
    if errors:
        print(f"check_layering: {len(errors)} upward include(s); see docs/architecture.md "
              f"for the layers", file=sys.stderr)
        return 1
    print(f"check_layering: {len(files)} files, no upward includes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
