"""What a valid value looks like, for the values that end up in commands, objects and AWS calls.

Each function returns ``None`` for a valid value, else the rule it breaks as a short phrase
(the configuration turns it into a one-line error naming the setting). The rules are the
ones the receiving side enforces, so a value is refused when it is read, not when a cluster
is half-built: container image references as Docker's ``distribution/reference`` grammar
defines them, Kubernetes names (DNS-1123), environment variable names, libfabric providers,
NCCL debug levels, host names.
"""

from __future__ import annotations

import re
import shlex

__all__ = [
    "FI_PROVIDERS",
    "NCCL_DEBUG_LEVELS",
    "command_problem",
    "env_name_problem",
    "fi_provider_problem",
    "host_problem",
    "image_name_problem",
    "image_reference_problem",
    "registry_problem",
    "tag_problem",
]

# distribution/reference's grammar (reference/regexp.go).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_PATH = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"^(?:{_DOMAIN}/)?{_PATH}(?::{_TAG})?(?:@{_DIGEST})?$")
_REGISTRY = re.compile(rf"^{_DOMAIN}(?:/{_PATH})?/?$")
_IMAGE_NAME = re.compile(rf"^{_PATH}$")
_TAG_RE = re.compile(rf"^{_TAG}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IPV4 = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")

#: libfabric providers ``FI_PROVIDER`` may name (``fi_info -l`` of libfabric 1.22 and the EFA installer).
FI_PROVIDERS = (
    "efa", "sockets", "tcp", "udp", "verbs", "shm", "sm2", "psm2", "psm3", "opx", "rxm", "rxd", "usnic",
    "ucx", "cxi", "lnx", "net",
)  # fmt: skip
#: ``NCCL_DEBUG`` levels.
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE", "ABORT")


def _printable(value: str) -> str | None:
    if any(ch in value for ch in "\n\r\t\x00") or any(not ch.isprintable() for ch in value):
        return "contains a control character (newline, tab, NUL...)"
    if any(ch.isspace() for ch in value):
        return "contains whitespace"
    return None


def image_reference_problem(reference: str) -> str | None:
    """What is wrong with a full image reference (``registry/path:tag`` or ``...@sha256:...``), or ``None``."""
    problem = _printable(reference)
    if problem:
        return problem
    if len(reference.split("@")[0].split(":")[0]) > 255 or not _REFERENCE.match(reference):
        return "is not a container image reference ([registry/]name[:tag][@digest], lower-case name)"
    return None


def registry_problem(registry: str) -> str | None:
    """What is wrong with a registry (``host[:port][/path]``, a trailing ``/`` allowed), or ``None``."""
    return _printable(registry) or (
        None
        if _REGISTRY.match(registry)
        else "is not a registry host (like 123456789012.dkr.ecr.us-west-2.amazonaws.com)"
    )


def image_name_problem(name: str) -> str | None:
    """What is wrong with an image repository name (``trainer``, ``team/trainer``), or ``None``."""
    return _printable(name) or (
        None
        if _IMAGE_NAME.match(name) and len(name) <= 255
        else "is not an image name (lower-case letters, digits, '.', '_', '-' and '/' between parts)"
    )


def tag_problem(tag: str) -> str | None:
    """What is wrong with an image tag (up to 128 of letters, digits, ``_``, ``.``, ``-``; not starting with ``.`` or ``-``)."""
    return _printable(tag) or (
        None if _TAG_RE.match(tag) else "is not an image tag (up to 128 letters, digits, '_', '.' or '-')"
    )


def env_name_problem(name: str) -> str | None:
    """What is wrong with an environment variable name, or ``None``."""
    return None if _ENV_NAME.match(name) else "is not an environment variable name (letters, digits and _)"


def fi_provider_problem(value: str) -> str | None:
    """What is wrong with a ``FI_PROVIDER`` value (a provider, a comma-separated list, ``^`` to exclude), or ``None``."""
    names = [part.strip() for part in value.lstrip("^").split(",")]
    unknown = [name for name in names if name.split(";")[0] not in FI_PROVIDERS]
    if unknown:
        return f"names an unknown libfabric provider {unknown[0]!r} (known: {', '.join(FI_PROVIDERS)})"
    return None


def host_problem(host: str) -> str | None:
    """What is wrong with a host name or IPv4 address, or ``None``."""
    match = _IPV4.match(host)
    if match:
        return None if all(int(part) <= 255 for part in match.groups()) else "is not an IPv4 address"
    return None if _HOST.match(host) else "is not a host name (lower-case letters, digits, '-' and '.')"


def command_problem(command: str) -> str | None:
    """What is wrong with a command line the workers run, or ``None``."""
    if "\x00" in command:
        return "contains a NUL character"
    try:
        words = shlex.split(command)
    except ValueError as error:
        return f"cannot be split into words ({error})"
    return None if words else "is empty"
