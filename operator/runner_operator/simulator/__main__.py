"""`python -m runner_operator.simulator`: the same as `runner-operator simulate`."""

from __future__ import annotations

import sys

from runner_operator.simulator.server import main

sys.exit(main())
