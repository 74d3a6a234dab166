"""What a valid value looks like, for the values that end up in commands, objects and AWS calls.

Each function returns ``None`` for a valid value, else the rule it breaks as a short phrase
(the configuration turns it into a one-line error naming the setting). The rules are the
ones the receiving side enforces, so a value is refused when it is read, not when a cluster
is half-built: container image references as Docker's ``distribution/reference`` grammar
defines them, Kubernetes names (DNS-1123), environment variable names, libfabric providers,
NCCL debug levels, host names, S3 bucket names.
"""

from __future__ import annotations

import re
import shlex

__all__ = [
    "FI_PROVIDERS",
    "NCCL_DEBUG_LEVELS",
    "bucket_name_problem",
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


# S3's rules for general purpose bucket names (Amazon S3 User Guide, "General purpose bucket naming rules",
# docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html, checked 2026-12-02).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problem(name: str) -> str | None:
    """What is wrong with an S3 general purpose bucket name, or ``None``."""
    if not _BUCKET.match(name):
        return (
            "is not an S3 bucket name (3 to 63 lower-case letters, digits, '.' and '-', "
            "starting and ending with a letter or digit)"
        )
    if ".." in name:
        return "has two adjacent periods, which S3 refuses in a bucket name"
    if _IPV4.match(name):
        return "is formatted as an IP address, which S3 refuses as a bucket name"
    for prefix in _BUCKET_PREFIXES:
        if name.startswith(prefix):
            return f"starts with {prefix!r}, a prefix S3 reserves"
    for suffix in _BUCKET_SUFFIXES:
        if name.endswith(suffix):
            return f"ends with {suffix!r}, a suffix S3 reserves"
    return None
