"""``python -m fsdp_trainer`` (and ``torchrun -m fsdp_trainer``)."""

import sys

from .cli import main

sys.exit(main())
