"""Writes the JAX reference files of tests/autodiff (grad_ref.json, vmap_ref.json): one case per
line, so a regenerated file diffs case by case."""
import json
import os

import jax


def write_cases(path, cases):
    with open(path, "w") as f:
        f.write('{"jax": ' + json.dumps(jax.__version__) + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {len(cases)} cases to {path} ({os.path.getsize(path) / 1e3:.0f} kB)")
