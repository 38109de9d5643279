"""The PJRT plugin the Python tests may run on: RLX_PJRT_PLUGIN, else the installed
lammps-jax-pjrt-cpu wheel's XLA CPU plugin (the C++ suites' default). pjrt_devices() is
["pjrt:0"] when one is found (and sets RLX_PJRT_PLUGIN for this process), else []."""

from __future__ import annotations

import importlib.util
import os


def pjrt_devices() -> list[str]:
    if not os.environ.get("RLX_PJRT_PLUGIN"):
        spec = importlib.util.find_spec("lammps_jax_pjrt_cpu")
        if spec is None or not spec.submodule_search_locations:
            return []
        path = os.path.join(list(spec.submodule_search_locations)[0], "pjrt_c_api_cpu_plugin.so")
        if not os.path.exists(path):
            return []
        os.environ["RLX_PJRT_PLUGIN"] = path
    return ["pjrt:0"]
