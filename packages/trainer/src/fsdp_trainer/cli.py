"""``fsdp-train`` / ``python -m fsdp_trainer``: parse ``--config FILE`` and ``--section.field VALUE`` flags, then train.

Imports nothing heavy before the config is valid, so ``--help`` and config errors are instant.
Exit status: 0 done, 2 bad settings (one line naming the flag), 1 any other failure. A process
that trained ends with ``os._exit`` (see the end of ``main``), so call ``train.run`` in-process instead.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from .config import help_text, load_config
from .errors import ConfigError

USAGE = """usage: torchrun [torchrun options] -m fsdp_trainer [--config FILE.yaml] [--section.field VALUE ...]
       fsdp-train [--config FILE.yaml] [--section.field VALUE ...]     (one process)
       fsdp-train --print-config [...]                                 (resolved config as JSON, then exit)
       --auto                                                          (= --auto.enabled true: fastest settings that fit)

Train a Llama model with PyTorch FSDP. Options (also --section.field=VALUE; 'none' clears an optional field):"""


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: returns the exit status, or ends the process once it has trained."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(USAGE + help_text())
        return 0
    config_path, print_only, overrides = None, False, []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--print-config":
            print_only = True
        elif arg == "--auto":  # short for --auto.enabled true
            overrides.append("--auto.enabled=true")
        elif arg == "--config" or arg.startswith("--config="):
            if "=" in arg:
                config_path = arg.split("=", 1)[1]
            elif i + 1 < len(args):
                config_path, i = args[i + 1], i + 1
            else:
                print("error: --config: missing file name", file=sys.stderr)
                return 2
        else:
            overrides.append(arg)
        i += 1
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if print_only:
        print(json.dumps(cfg.to_dict(), indent=1))
        return 0
    from .logs import setup_logging
    from .train import main_with_config

    setup_logging(cfg.runtime.log_all_ranks, fp8=cfg.fp8.enabled)
    code = main_with_config(cfg)
    # Leave without interpreter finalization: after a clean run, gloo's worker threads can abort
    # it (SIGABRT, "terminate called without an active exception") and turn success into a
    # failed torchrun. Everything is written and flushed by now, and the process group destroyed.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
