"""What torchrun starts for each rank of a local run: the trainer, in a process that dies with its agent.

``python -m fsdp_sdk.backends.local.rank fsdp_trainer --model.preset tiny ...`` sets the parent-death
signal (``SIGKILL`` when the agent dies, even by ``SIGKILL``), then runs the named module as
``python -m`` would. Without it, a killed agent leaves its ranks running unsupervised.
"""

from __future__ import annotations

import os
import runpy
import sys

from fsdp_sdk.processes import die_with_parent


def main() -> None:
    """Run ``sys.argv[1]`` as the main module with the remaining arguments, dying with the parent process."""
    if len(sys.argv) < 2:
        sys.exit("usage: python -m fsdp_sdk.backends.local.rank MODULE [ARGS...]")
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the agent died before the signal was armed
        sys.exit(1)
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
