"""`python -m runner.preflight`: see runner.preflight.entry."""

import sys

from runner.preflight.entry import main

sys.exit(main())
