"""The application object every command receives as ``ctx.obj``.

It collects what the common options say (config file, .env file, settings from
flags, debug) and builds the :class:`~fsdp_sdk.Client` on first use, so a
command that needs no configuration never reads one.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from fsdp_sdk.client import Client
    from fsdp_sdk.config import Config


class Application:
    """State shared by the root group and the command being run."""

    def __init__(self) -> None:
        self.config_file: str | None = None
        self.env_file: str | None = None
        self.debug = False
        #: (dotted path, value, name as typed, source) from command-line flags, in the order click processed them.
        self.settings: list[tuple[str, Any, str, str]] = []
        self._client: Client | None = None

    def set(self, path: str, value: Any, name: str, source: str = "command line") -> None:
        """Record a configuration value given on the command line.

        :param path: the dotted configuration path.
        :param value: the value.
        :param name: how the user named it (``--nodes``), for error messages.
        :param source: where it came from, for error messages.
        """
        self.settings.append((path, value, name, source))
        self._client = None

    def load_config(self) -> Config:
        """The configuration from every source, not yet resolved."""
        from fsdp_sdk.config import Setting, load_config

        overrides = [Setting(path, value, name, source) for path, value, name, source in self.settings]
        return load_config(self.config_file, self.env_file, overrides)

    @property
    def client(self) -> Client:
        """The client for the resolved configuration (built once)."""
        if self._client is None:
            from fsdp_sdk.client import Client

            self._client = Client(self.load_config(), progress=self.progress)
        return self._client

    @staticmethod
    def progress(message: str) -> None:
        """Print a progress line on stderr."""
        click.echo(message, err=True)

    @staticmethod
    def echo_json(data: Any) -> None:
        """Print ``data`` as JSON on stdout."""
        click.echo(json.dumps(data, indent=2, default=str))

    @staticmethod
    def echo(message: str = "", *, err: bool = False) -> None:
        """Print a line (stdout, or stderr with ``err``)."""
        click.echo(message, err=err, file=sys.stderr if err else None)
