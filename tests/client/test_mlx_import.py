"""``import pion`` never imports mlx: the MLX runtime loads only when selected."""

from __future__ import annotations

import subprocess
import sys

PROBE = ("import sys, pion; pion.PionClient; pion.load_model; pion.PionPromptCache; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))")


def test_importing_pion_and_its_transformers_api_loads_no_mlx_module() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
