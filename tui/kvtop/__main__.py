"""`python -m kvtop` runs kvtop."""

from kvtop.cli import main

raise SystemExit(main())
