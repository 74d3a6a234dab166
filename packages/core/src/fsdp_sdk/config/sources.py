"""The sources of a configuration, each overriding the one before: the defaults, a YAML file, a ``.env`` file,
``FSDP_SDK_*`` environment variables, command-line flags and ``--set``, each read into
:class:`~fsdp_sdk.config.Setting` records; :func:`~fsdp_sdk.config.load_config` applies them all.

YAML and the ``.env`` reader (:mod:`fsdp_sdk.envfile`) are imported when a file is read.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fsdp_sdk import secrets
from fsdp_sdk.config.conversions import KNOWN_PLUGIN_SECTIONS, _field_names, _unknown_key, close_matches
from fsdp_sdk.config.sections import ClusterConfig, JobConfig, Setting, _flatten_mapping
from fsdp_sdk.errors import ConfigError

__all__ = [
    "DOTENV_NAMES",
    "ENV_PREFIX",
    "SEED_NOT_READ",
    "parse_trainer_args",
    "setting_from_pair",
]

#: Prefix of the environment variables that set configuration fields.
ENV_PREFIX = "FSDP_SDK_"


def _dotenv_names(classes: Mapping[str, type]) -> dict[str, str]:
    return {
        f.metadata["dotenv"]: f"{section}.{f.name}"
        for section, cls in classes.items()
        for f in dataclasses.fields(cls)
        if "dotenv" in f.metadata
    }


#: Variable names of the original ``.env`` files and the field each sets.
DOTENV_NAMES: dict[str, str] = {
    f.metadata["dotenv"]: f"{section}.{f.name}"
    for section, cls in (("cluster", ClusterConfig), ("job", JobConfig))
    for f in dataclasses.fields(cls)
    if "dotenv" in f.metadata
}
DOTENV_NAMES["MODEL_NAME"] = "trainer.model.name_or_path"


# --------------------------------------------------------------------- settings from the command line


def setting_from_pair(item: str, *, source: str = "--set") -> Setting:
    """One ``KEY=VALUE`` of ``--set`` as a setting; the key is the dotted path as typed (``job.num_workers``,
    ``model.preset``): the caller decides which keys are trainer settings, once it knows the plugins' sections.

    :raises ConfigError: ``item`` is not ``KEY=VALUE``.
    """
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(
            source,
            f"{secrets.mask_refused(item)!r} is not KEY=VALUE",
            "e.g. --set job.num_workers=4 or --set model.preset=tiny",
        )
    return Setting(key.strip(), value, key.strip(), source)


def parse_trainer_args(args: Sequence[str]) -> list[Setting]:
    """Turn trailing trainer arguments (``--train.steps 20``, ``--model.preset=tiny``, ``--auto``) into settings.

    :param args: arguments as given after ``--`` on the command line; ``--auto`` is the trainer's
        shorthand for ``--auto.enabled true``.
    :raises ConfigError: an argument is not ``--section.field VALUE``.
    """
    settings: list[Setting] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--auto":
            settings.append(Setting("trainer.auto.enabled", "true", "--auto", "trainer arguments"))
            i += 1
            continue
        key = arg[2:] if arg.startswith("--") else ""
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        elif key and i + 1 < len(args):
            value = args[i + 1]
            i += 2
        elif key.count(".") >= 1 and all(key.split(".")):
            raise ConfigError(arg, "needs a value", f"give one: {arg} VALUE (or {arg}=VALUE)")
        else:
            raise ConfigError(arg, "is not a trainer option", "pass trainer options as --section.field VALUE after --")
        if key.count(".") < 1 or not all(key.split(".")):
            raise ConfigError(arg, "is not a trainer option", "trainer options look like --train.steps 20")
        settings.append(Setting(f"trainer.{key}", value, f"--{key}", "trainer arguments"))
    return settings


# --------------------------------------------------------------------- loading


def _read_yaml(path: Path, classes: Mapping[str, type]) -> list[Setting]:
    if not path.is_file():
        raise ConfigError("--config", f"file {str(path)!r} does not exist", "pass the path of an existing YAML file")
    import yaml  # imported here: the CLI must start without it

    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(str(path), f"invalid YAML{where}: {problem}", "fix the file's syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read ({exc})", "check the file") from None
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ConfigError(str(path), "the top level must be a mapping", "write sections like 'cluster:' and 'job:'")
    return _flatten_document(data, path.name, classes, _key_lines(yaml.compose(text)))


def _key_lines(node: Any, prefix: str = "", lines: dict[str, int] | None = None) -> dict[str, int]:
    """The line of every key of a composed YAML document, by dotted path (``trainer.model.preset`` -> 3)."""
    import yaml

    lines = {} if lines is None else lines
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = f"{prefix}.{key.value}" if prefix else str(key.value)
            lines.setdefault(path, key.start_mark.line + 1)
            _key_lines(value, path, lines)
    return lines


def _flatten_document(
    data: Mapping[str, Any], source: str, classes: Mapping[str, type], lines: Mapping[str, int] | None = None
) -> list[Setting]:
    """The settings of a YAML document (``lines``: each key's line, said in the error about a key)."""
    lines = lines or {}

    def at(path: str) -> str:
        return f"{source}, line {lines[path]}" if path in lines else source

    settings: list[Setting] = []
    for section, body in data.items():
        section = str(section)
        if section not in (*classes, "trainer"):
            raise _unknown_key(section, [*classes, "trainer"], at(section))
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise ConfigError(
                section, "must be a mapping of settings", f"write '{section}:' followed by indented keys", source=source
            )
        if section == "trainer":
            for key, value in _flatten_mapping(body):
                path = f"trainer.{key}"
                settings.append(Setting(path, value, path, source, lines.get(path)))
            continue
        names = _field_names(classes[section])
        for key, value in body.items():
            path = f"{section}.{key}"
            if key not in names:
                raise _unknown_key(path, [f"{section}.{n}" for n in names], at(path))
            settings.append(Setting(path, value, path, source, lines.get(path)))
    return settings


#: Variables of the seed scripts' ``.env`` files that fsdp-sdk does not read, and why. ``ACCOUNT`` is read only
#: through the variables that use it (``REGISTRY=${ACCOUNT}.dkr.ecr...``).
SEED_NOT_READ: dict[str, str | None] = {
    "ACCOUNT": None,
    "DOCKERFILE_EXT": "fsdp-sdk builds its own trainer image ('fsdp-sdk image build'): the seed's Dockerfile "
    "variants do not apply",
}
# nanoGPT model sizes of the seed's example (MODEL_NAME=10.5M ... 20B): not models the trainer can load.
_NANOGPT_SIZE = re.compile(r"^\d+(\.\d+)?[MB]$")


def _seed_value(name: str, value: str, source: str, line: int) -> str:
    """The seed conventions fsdp-sdk translates: ``TAG=":v1"`` (the scripts join ``$IMAGE$TAG``)."""
    if name == "TAG" and value.startswith(":"):
        return value[1:]
    if name == "MODEL_NAME" and _NANOGPT_SIZE.match(value):
        raise ConfigError(
            name,
            f"{value!r} is a nanoGPT size of the seed's example, not a Llama model",
            "set MODEL_NAME to a Hugging Face Llama model id (meta-llama/Llama-2-7b-hf) or a local model "
            "directory, or use a preset (--preset llama2-7b)",
            source=f"{source} line {line}",
        )
    return value


def _read_dotenv(path: Path, classes: Mapping[str, type], warnings: list[str]) -> list[Setting]:
    if not path.is_file():
        raise ConfigError("--env-file", f"file {str(path)!r} does not exist", "pass the path of an existing .env file")
    from fsdp_sdk.envfile import read_env_file

    source = path.name
    names = {**DOTENV_NAMES, **_dotenv_names(classes)}
    settings: list[Setting] = []
    for entry in read_env_file(path, os.environ):
        name = entry.name
        read = name in names or (name.startswith(ENV_PREFIX) and "__" in name)
        if not read:
            if name in SEED_NOT_READ:
                if SEED_NOT_READ[name]:
                    warnings.append(f"{name} (from {source} line {entry.line}) is not read: {SEED_NOT_READ[name]}")
                continue
            close = close_matches(name, [*names, *SEED_NOT_READ], n=1, cutoff=0.85)
            if close:
                warnings.append(
                    f"{name} (from {source} line {entry.line}) is not read by fsdp-sdk; did you mean {close[0]}?"
                )
            continue  # anything else belongs to the user's scripts, not to us
        if entry.value is None:
            culprit = entry.culprit
            fix = (
                f"set {culprit} to its value in {source} (fsdp-sdk runs no commands), or write {name} itself"
                if culprit and culprit != name
                else f"write the value itself in {source} (fsdp-sdk runs no commands)"
            )
            raise ConfigError(name, f"{entry.problem}", fix, source=f"{source} line {entry.line}")
        if entry.value == "":
            continue  # `NAME=`: unset
        value = _seed_value(name, entry.value, source, entry.line)
        if name in names:
            settings.append(Setting(names[name], value, name, source))
        else:
            settings.append(_env_setting(name, value, source, classes))
    return settings


def _read_environ(environ: Mapping[str, str], classes: Mapping[str, type]) -> list[Setting]:
    settings = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and "__" in name and environ[name] != "":
            secrets.register_named(name, environ[name])
            settings.append(_env_setting(name, environ[name], "environment", classes))
    return settings


def _env_setting(name: str, value: str, source: str, classes: Mapping[str, type]) -> Setting:
    parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
    section = parts[0]
    if section == "trainer" and len(parts) >= 3 and all(parts):
        return Setting(".".join(parts), value, name, source)
    if section in classes and len(parts) == 2 and parts[1] in _field_names(classes[section]):
        return Setting(".".join(parts), value, name, source)
    if section in KNOWN_PLUGIN_SECTIONS and section not in classes:
        raise _unknown_key(".".join(parts), [], source)
    known = [f"{ENV_PREFIX}{s.upper()}__{n.upper()}" for s, cls in classes.items() for n in _field_names(cls)]
    close = close_matches(name, known, n=1)
    fix = (
        f"did you mean {close[0]}?"
        if close
        else f"use {ENV_PREFIX}<SECTION>__<FIELD>, e.g. {ENV_PREFIX}JOB__NUM_WORKERS"
    )
    raise ConfigError(name, "is not a configuration setting", fix, source=source)
