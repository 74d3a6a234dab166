"""The builtin corpus for tiny presets: docstrings of Python standard-library modules.

Real English-and-code text that every Python installation already has, so a
newcomer's first run needs no download and no shipped data, and its loss falls
visibly. Documents are gathered with ``inspect`` in a fixed module order, so every
rank builds the same corpus. Only pure-Python modules whose import has no side
effects are listed.
"""

from __future__ import annotations

import importlib
import inspect
import warnings

MODULES = (
    "abc",
    "argparse",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "gzip",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "inspect",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "mimetypes",
    "numbers",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "shlex",
    "shutil",
    "socket",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
)


def _docs_of(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    docs = []
    if module.__doc__:
        docs.append(inspect.cleandoc(module.__doc__))
    for name in sorted(vars(module)):
        obj = getattr(module, name)
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            members = [(name, obj)]
            if inspect.isclass(obj):
                members += [
                    (f"{name}.{m}", f)
                    for m, f in sorted(vars(obj).items())
                    if inspect.isfunction(f) and not m.startswith("_")
                ]
            for qualname, member in members:
                doc = inspect.getdoc(member)
                if doc and len(doc) > 40:
                    docs.append(f"{module_name}.{qualname}\n{doc}")
    return docs


def builtin_documents() -> list[str]:
    """All documents of the builtin corpus, in a deterministic order."""
    docs: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # touching deprecated aliases (typing.re) warns
        for name in MODULES:
            try:
                docs.extend(_docs_of(name))
            except ImportError:  # a stripped-down Python may lack a module; the corpus is still real text
                continue
    return docs
