"""The one safe margin: free GPU memory after startup under it is an OOM risk.

A plain number at the bottom of the model, so the thresholds (tui/kvtop/model/status/levels.py)
and the sizing (tui/kvtop/model/sizing/formula.py) share it without either importing the other.
"""

from __future__ import annotations

# Below this much free memory after startup, prefill activations of a large chunk can OOM. The
# default of the one margin every view uses (the alerts, the report, the formula screen, the
# insights and `kvtop plan`); `safe_margin_gib` in the config file or --safe-margin sets it.
# SGLang's own tuning advice is to leave 5 to 8 of its "GB" (GiB) free after startup; this is
# the low end of that range (docs/alerts.md, "The safe margin").
SAFE_HEADROOM_GIB = 5.0
SAFE_MARGIN_MAX_GIB = 1024.0  # the largest margin the config file or --safe-margin accepts
