#!/usr/bin/env python3
"""Writes the ONNX backend node test cases of the installed `onnx` package into a cache directory.

The `onnx` wheel builds its ~1,900 node cases in memory (`onnx.backend.test.case.node`) instead of
shipping them as files; this script writes each as ONNX's own backend-test layout:

    DIR/<case>/model.onnx
    DIR/<case>/test_data_set_<i>/{input,output}_<j>.pb     (TensorProto, or Sequence/Optional)
    DIR/<case>/tolerance                                     ("rtol atol", the case's own)

DIR defaults to $RLX_ONNX_NODE_CASES, else ${XDG_CACHE_HOME:-~/.cache}/rlx/onnx-node-cases/onnx-V
(V the pinned onnx version): never the repository. A finished directory holds a `complete` stamp
(the onnx version and the case count), so a second run returns at once. The tests of
tests/import/ (onnx_node_test.cc) read the directory; the onnx version is pinned because the
committed list of expected failures (tests/import/onnx_node_failures.txt) names its cases.

Usage: python3 scripts/onnx_node_cases.py [--out DIR] [--print-dir]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

PINNED_ONNX = "1.23.2"


def default_dir() -> str:
    if os.environ.get("RLX_ONNX_NODE_CASES"):
        return os.environ["RLX_ONNX_NODE_CASES"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "rlx", "onnx-node-cases", "onnx-" + PINNED_ONNX)


def serialize(value, type_proto, name: str) -> bytes:
    """One input/output of a data set as ONNX's cmd_tools writes it."""
    from onnx import TensorProto, numpy_helper

    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def write_cases(out: str) -> int:
    import onnx
    import onnx.backend.test.case.node as node_cases

    if onnx.__version__ != PINNED_ONNX:
        sys.exit(
            f"onnx_node_cases.py: onnx {onnx.__version__} is installed, the cases are pinned to "
            f"{PINNED_ONNX} (pip install onnx=={PINNED_ONNX}, or scripts/install_deps.sh)"
        )
    cases = node_cases.collect_testcases()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    # Written beside the destination and renamed at the end: an interrupted run leaves no
    # half-written directory behind that a later run would take as complete.
    tmp = tempfile.mkdtemp(prefix=".onnx-node-cases-", dir=parent)
    try:
        for case in cases:
            case_dir = os.path.join(tmp, case.name)
            os.makedirs(case_dir)
            with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
                f.write(case.model.SerializeToString())
            with open(os.path.join(case_dir, "tolerance"), "w") as f:
                f.write(f"{case.rtol!r} {case.atol!r}\n")
            graph = case.model.graph
            for i, (inputs, outputs) in enumerate(case.data_sets):
                ds = os.path.join(case_dir, f"test_data_set_{i}")
                os.makedirs(ds)
                for j, value in enumerate(inputs):
                    with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
                        f.write(serialize(value, graph.input[j].type, graph.input[j].name))
                for j, value in enumerate(outputs):
                    with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
                        f.write(serialize(value, graph.output[j].type, graph.output[j].name))
        with open(os.path.join(tmp, "complete"), "w") as f:
            f.write(f"onnx {onnx.__version__} cases {len(cases)}\n")
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return len(cases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=default_dir(), help="cache directory (default: %(default)s)")
    parser.add_argument("--print-dir", action="store_true", help="print the directory and exit")
    args = parser.parse_args()
    if args.print_dir:
        print(args.out)
        return
    stamp = os.path.join(args.out, "complete")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().startswith(f"onnx {PINNED_ONNX} "):
                return
    n = write_cases(args.out)
    print(f"onnx_node_cases.py: wrote {n} node cases of onnx {PINNED_ONNX} to {args.out}")


if __name__ == "__main__":
    main()
