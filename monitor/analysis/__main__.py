"""`python -m monitor.analysis RUN_DIR`, and the file to give spark-submit."""

import sys

from monitor.analysis import main

sys.exit(main(sys.argv[1:]))
