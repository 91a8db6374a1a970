"""python -m attnsel.bench.tools.evidence"""

import sys

from attnsel.bench.tools.evidence import main

sys.exit(main())
