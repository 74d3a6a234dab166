"""``fsdp-sdk config show`` prints YAML without PyYAML: what it prints must read back as the same data."""

from __future__ import annotations

import math

import pytest
import yaml

from fsdp_sdk.cli.output import to_yaml

NASTY = {
    "plain": "p5.48xlarge",
    "path": "/root/.local/state/fsdp-sdk",
    "looks like numbers": ["1.31", "0x10", "1e3", "010", "-1", ".5"],
    "looks like booleans or null": ["yes", "No", "ON", "off", "y", "n", "true", "False", "null", "~", ""],
    "special floats as strings": [".inf", ".NaN", "-.inf"],
    "punctuation": [
        "a: b",
        "#comment",
        "- item",
        "[x]",
        "{y}",
        "*alias",
        "&anchor",
        "!tag",
        "'q'",
        '"dq"',
        "a #b",
        "%x",
        "@x",
        "`x",
    ],
    "spaces and lines": [" lead", "trail ", "two\nlines", "tab\there"],
    "unicode": "héllo ✓",
    "secret": "**********",
    "numbers": [0, -3, 2.5, 1e-9, 10**12],
    "floats": [math.inf, -math.inf],
    "booleans": [True, False, None],
    "empty": {"list": [], "dict": {}},
    "nested": {"list of dicts": [{"a": 1, "b": ["x", {"c": None}]}, {}], "deep": {"deeper": {"deepest": "ok"}}},
    "key: with colon": 1,
    "123": "numeric-looking key",
}


def test_to_yaml_reads_back_as_the_same_data() -> None:
    assert yaml.safe_load(to_yaml(NASTY)) == NASTY


def test_nan_reads_back_as_nan() -> None:
    assert math.isnan(yaml.safe_load(to_yaml({"x": float("nan")}))["x"])


@pytest.mark.parametrize("flag", [[], ["--origins"]])
def test_config_show_yaml_is_the_json_output(flag: list[str], tmp_path, monkeypatch) -> None:
    import json

    from click.testing import CliRunner

    from fsdp_sdk.cli import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    args = ["--set", "job.env=WANDB_API_KEY=abc", "--set", "cluster.availability_zones=us-west-2a,us-west-2b"]
    runner = CliRunner()
    as_yaml = runner.invoke(cli, [*args, "config", "show", *flag])
    as_json = runner.invoke(cli, [*args, "config", "show", "--json", *flag])
    assert as_yaml.exit_code == 0 and as_json.exit_code == 0, as_yaml.output + as_json.output
    assert yaml.safe_load(as_yaml.output) == json.loads(as_json.output)
