"""`python -m tui` runs kvtop."""

from tui.cli import main

raise SystemExit(main())
