"""``python -m mha_course.bench``: see :mod:`mha_course.bench.cli`."""

import sys

from .cli import main

sys.exit(main())
