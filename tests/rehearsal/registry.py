"""The image registries the rehearsal's nodes pull from: a container runs only where its image's tag exists.

What exists, each from a record of the outside world rather than from what fsdp-sdk renders:

* the tags fsdp-sdk's dated table records as seen (``fsdp_sdk/data/image_tags.json``, each entry with where and
  when it was seen; the renders take their tags from ``pins.json``, so a pin moved to a tag nobody saw fails here);
* the images eksctl's own assets name (``tests/eksctl/assets``, copied from eksctl's ``pkg/addons/assets`` at
  eksctl-io/eksctl@99984adb: eksctl ships and applies them, so they are there);
* the trainer images pushed to the account's ECR are the ``docker`` stand-in's record, checked where a pod's
  container starts (``rehearsal.operator``).

A tag none of these has is what a node reports as ``ErrImagePull``: the container never starts, and a device plugin
that does not run advertises nothing.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from fsdp_sdk.pins import image_tag

ASSETS = Path(__file__).resolve().parents[1] / "eksctl" / "assets"
_EKS_REGISTRY = r"[0-9]{12}\.dkr\.ecr\.[a-z0-9.-]+"


@functools.cache
def _eksctl_images() -> list[re.Pattern[str]]:
    found: list[re.Pattern[str]] = []
    for path in sorted(ASSETS.glob("*.yaml")):
        for reference in re.findall(r"image:\s*\"?([^\s\"]+)", path.read_text()):
            # eksctl fills in the region's EKS account and DNS suffix ("%s.dkr.ecr.%s.%s/...": useRegionalImage)
            pattern = re.escape(reference).replace(re.escape("%s.dkr.ecr.%s.%s"), _EKS_REGISTRY)
            pattern = re.sub(r"[0-9]{12}\\\.dkr\\\.ecr\\\.[a-z0-9\\.-]+?\\\.amazonaws\\\.com", _EKS_REGISTRY, pattern)
            found.append(re.compile(pattern))
    return found


def pullable(reference: str) -> bool:
    """Whether a node could pull ``reference`` (``repository:tag``) from its registry."""
    if image_tag(reference) is not None:
        return True
    return any(pattern.fullmatch(reference) for pattern in _eksctl_images())
