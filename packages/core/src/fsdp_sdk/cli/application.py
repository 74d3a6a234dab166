"""The application object every command receives as ``ctx.obj``.

It collects what the common options say (config file, .env file, settings from
flags, kubeconfig, debug) and builds the :class:`~fsdp_sdk.Client` on first use,
once per command, so a command that needs no configuration never reads one and
every command that does goes through the library API.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
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
        self.kubeconfig: str | None = None
        self.kube_context: str | None = None
        self.debug = False
        #: (dotted path, value, name as typed, source) from command-line flags, in the order click processed them.
        self.settings: list[tuple[str, Any, str, str]] = []
        #: Where progress lines go instead of stderr while a command shows a live display.
        self.progress_sink: Callable[[str], None] | None = None
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

    def _overrides(self) -> list[Any]:
        """The flags' settings; a ``--set`` key outside every section (core and plugins') is a trainer setting."""
        from fsdp_sdk.config import CORE_SECTIONS, Setting
        from fsdp_sdk.plugins import get_plugins

        sections = {*CORE_SECTIONS, "trainer", *get_plugins().settings.names()}
        overrides = []
        for path, value, name, source in self.settings:
            if source == "--set" and path.split(".", 1)[0] not in sections:
                path = f"trainer.{path}"
            overrides.append(Setting(path, value, name, source))
        return overrides

    @property
    def client(self) -> Client:
        """The client for the configuration from every source, resolved once per command."""
        if self._client is None:
            from fsdp_sdk.client import Client
            from fsdp_sdk.plugins import get_plugins

            self._client = Client.from_sources(
                self.config_file,
                self.env_file,
                self._overrides(),
                plugins=get_plugins(),
                progress=self.progress,
                kubeconfig=self.kubeconfig,
                kube_context=self.kube_context,
            )
            for warning in self._client.config.warnings:
                click.echo(f"fsdp-sdk: warning: {warning}", err=True)
        return self._client

    @property
    def config(self) -> Config:
        """The resolved configuration (the client's)."""
        return self.client.config

    def progress(self, message: str) -> None:
        """Print a progress line on stderr (or hand it to :attr:`progress_sink`)."""
        if self.progress_sink is not None:
            self.progress_sink(message)
        else:
            click.echo(message, err=True)

    @staticmethod
    def echo_json(data: Any) -> None:
        """Print ``data`` as JSON on stdout."""
        click.echo(json.dumps(data, indent=2, default=str))

    @staticmethod
    def echo(message: str = "", *, err: bool = False) -> None:
        """Print a line (stdout, or stderr with ``err``)."""
        click.echo(message, err=err, file=sys.stderr if err else None)
