"""`python -m hop ...` is `hop ...`."""

import sys

from hop.cli import main

sys.exit(main())
