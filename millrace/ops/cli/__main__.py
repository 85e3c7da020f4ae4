"""``python -m millrace.ops.cli``: the ``millrace`` command, for a process without the script."""

import sys

from millrace.ops.cli import main

sys.exit(main())
