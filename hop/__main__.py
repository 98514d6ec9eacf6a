"""`python -m hop ...` is `hop ...`."""

import sys

from hop import main

sys.exit(main())
