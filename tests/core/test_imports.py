"""Import rules: no import cycle among the modules of each package, and the layers of ``docs/design.md``
("Layers: who may import whom"), held over the whole import graph.

The imports are read from the source with ``ast`` (nothing is imported). Every import counts: at the top level,
inside functions (how the CLI keeps its start-up budget: the layers are imported when a command needs them) and
under ``if TYPE_CHECKING:`` (a name used in an annotation is a dependency too). Over that whole graph:

* no circle, in any package;
* the layers (:data:`LAYERS`, :data:`MAY_IMPORT`) of docs/design.md hold; inside the model layer, the configuration
  is below the plugin set (a :class:`~fsdp_sdk.config.Config` never names a plugin set, and what resolving reads of
  one is a protocol of :mod:`fsdp_sdk.config.resolution`), and backends and hook specifications name what they are
  given by :class:`~fsdp_sdk.contracts.ResolvedConfig`, not by the plugin set's :class:`~fsdp_sdk.resolved.Resolved`.

An import of a module's own ancestor package (``from fsdp_sdk import __version__``) is not an edge:
Python has always imported the ancestors first, so it cannot take part in an import-order problem.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "fsdp_sdk": ROOT / "packages/core/src/fsdp_sdk",
    "fsdp_sdk_eksctl": ROOT / "packages/backend-eksctl/src/fsdp_sdk_eksctl",
    "fsdp_sdk_terraform": ROOT / "packages/backend-terraform/src/fsdp_sdk_terraform",
    "fsdp_sdk_observability": ROOT / "packages/observability/src/fsdp_sdk_observability",
    "fsdp_trainer": ROOT / "packages/trainer/src/fsdp_trainer",
}


def _modules(package: str) -> dict[str, Path]:
    root = PACKAGES[package]
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(nodes: list[ast.stmt], *, type_checking: bool, functions: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if functions:
                yield from _imports(node.body, type_checking=type_checking, functions=functions)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            if type_checking:
                yield from _imports(node.body, type_checking=type_checking, functions=functions)
            yield from _imports(node.orelse, type_checking=type_checking, functions=functions)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from _imports(children, type_checking=type_checking, functions=functions)


def import_graph(package: str, *, type_checking: bool = False, functions: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")))}
        edges: set[str] = set()
        for node in _imports(_tree(path).body, type_checking=type_checking, functions=functions):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
                continue
            base = node.module or ""
            if node.level:
                parent = here[: len(here) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    edges.add(f"{base}.{alias.name}")
                elif base in modules:
                    edges.add(base)
        graph[name] = edges - ancestors - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_follower_and_the_shared_rendezvous_reach_back_into_nothing() -> None:
    """Counting imports inside functions too: the log follower does not import the job client, and the
    rendezvous clearing shared with the local backend does not import the Kubernetes layer."""
    graph = import_graph("fsdp_sdk", type_checking=True, functions=True)
    assert "fsdp_sdk.k8s.jobs" not in graph["fsdp_sdk.k8s.follow"]
    assert not {m for m in graph["fsdp_sdk.rendezvous"] if m.startswith("fsdp_sdk.k8s")}


def test_the_library_does_not_reach_into_the_cli() -> None:
    """Counting imports inside functions too: no module outside ``fsdp_sdk.cli`` imports the CLI layer (what both
    print, such as the YAML writer, lives in the library)."""
    graph = import_graph("fsdp_sdk", type_checking=True, functions=True)
    reaching = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not module.startswith("fsdp_sdk.cli")
        for target in targets
        if target == "fsdp_sdk.cli" or target.startswith("fsdp_sdk.cli.")
    )
    assert reaching == []


def test_the_graph_sees_imports() -> None:
    """The reader is not blind: known edges of each kind are found."""
    runtime = import_graph("fsdp_sdk")
    assert "fsdp_sdk.k8s.job_pods" in runtime["fsdp_sdk.k8s.follow"]
    assert "fsdp_sdk.config.sections" in runtime["fsdp_sdk.config.sources"]
    typed = import_graph("fsdp_sdk", type_checking=True)
    assert "fsdp_sdk.k8s.kube" in typed["fsdp_sdk.k8s.follow"] - runtime["fsdp_sdk.k8s.follow"]
    lazy = import_graph("fsdp_sdk", functions=True)
    assert "fsdp_sdk.k8s.follow" in lazy["fsdp_sdk.k8s.jobs"] - runtime["fsdp_sdk.k8s.jobs"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ---------------------------------------------------------------------- the whole graph: circles and layers

#: The layers of ``fsdp_sdk``, lowest first (docs/design.md): a module imports its own layer and those below it,
#: never one above, counting every import. A module in none of the named ones is in "work".
MODEL = {
    "fsdp_sdk._fields",
    "fsdp_sdk.backends.base",
    "fsdp_sdk.contracts",
    "fsdp_sdk.entry_points",
    "fsdp_sdk.envfile",
    "fsdp_sdk.errors",
    "fsdp_sdk.grammar",
    "fsdp_sdk.hookspecs",
    "fsdp_sdk.instance_types",
    "fsdp_sdk.markers",
    "fsdp_sdk.monitoring",
    "fsdp_sdk.pins",
    "fsdp_sdk.plugins",
    "fsdp_sdk.preflight",
    "fsdp_sdk.registry",
    "fsdp_sdk.resolved",
    "fsdp_sdk.runs",
    "fsdp_sdk.secrets",
}
LAYERS = ["model", "work", "workflows", "client", "over the client", "cli"]


def layer(module: str) -> str:
    """The layer of a module of ``fsdp_sdk`` (see :data:`LAYERS`)."""
    if module in MODEL or module.startswith("fsdp_sdk.config"):
        return "model"
    if module.startswith("fsdp_sdk.workflows") or module == "fsdp_sdk.launch":
        return "workflows"
    if module == "fsdp_sdk.client":
        return "client"
    if module in {"fsdp_sdk", "fsdp_sdk.__main__", "fsdp_sdk.scaling", "fsdp_sdk.scaling_chart"} or module.startswith(
        "fsdp_sdk.reports"
    ):
        return "over the client"
    if module == "fsdp_sdk.cli" or module.startswith("fsdp_sdk.cli."):
        return "cli"
    return "work"


#: Which packages each package may import (every import counted): the trainer none of the others; core the
#: trainer (inside the functions that estimate or validate its settings); a plugin core and the trainer, never
#: another plugin. Core never imports a plugin package: it finds them through the ``fsdp_sdk`` entry points.
MAY_IMPORT = {
    "fsdp_trainer": set(),
    "fsdp_sdk": {"fsdp_trainer"},
    "fsdp_sdk_eksctl": {"fsdp_sdk", "fsdp_trainer"},
    "fsdp_sdk_terraform": {"fsdp_sdk", "fsdp_trainer"},
    "fsdp_sdk_observability": {"fsdp_sdk", "fsdp_trainer"},
}


def _imported_names(package: str) -> Iterator[tuple[str, str]]:
    """(module, absolute name it imports) for every import of the package, inside functions and type-only too."""
    for name, path in _modules(package).items():
        for node in _imports(_tree(path).body, type_checking=True, functions=True):
            if isinstance(node, ast.Import):
                yield from ((name, alias.name) for alias in node.names)
            elif node.module and not node.level:
                yield name, node.module


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_circle_in_the_whole_import_graph(package: str) -> None:
    """Counting imports inside functions and under ``if TYPE_CHECKING:``: no circle at all."""
    assert cycles(import_graph(package, type_checking=True, functions=True)) == []


#: What the configuration is built from and what sits above it in the model layer: the plugin set, the resolved
#: configuration that keeps it, and the hook specifications and backend interface the plugin set names.
CONFIGURATION = {
    "fsdp_sdk.config",
    "fsdp_sdk.config.sections",
    "fsdp_sdk.config.conversions",
    "fsdp_sdk.config.sources",
}
ABOVE_THE_CONFIGURATION = {"fsdp_sdk.plugins", "fsdp_sdk.resolved", "fsdp_sdk.hookspecs", "fsdp_sdk.backends.base"}


def test_the_configuration_never_names_the_plugin_set() -> None:
    """A configuration is read and built without a plugin set; resolving takes one (by the registries it reads), and
    what backends and hooks are given is a contract below the plugin set: so the two never name each other."""
    graph = import_graph("fsdp_sdk", type_checking=True, functions=True)
    seen: dict[str, set[str]] = {}
    for module in sorted(CONFIGURATION | {"fsdp_sdk.config.model", "fsdp_sdk.config.resolution"}):
        reached, todo = set(), [module]
        while todo:
            for target in graph[todo.pop()] - reached:
                reached.add(target)
                todo.append(target)
        seen[module] = reached
    for module in sorted(CONFIGURATION | {"fsdp_sdk.config.model"}):
        assert not seen[module] & (ABOVE_THE_CONFIGURATION | {"fsdp_sdk.config.resolution"}), module
    assert not seen["fsdp_sdk.config.resolution"] & {"fsdp_sdk.plugins", "fsdp_sdk.resolved", "fsdp_sdk.hookspecs"}
    for module in ("fsdp_sdk.hookspecs", "fsdp_sdk.backends.base", "fsdp_sdk.contracts"):
        assert not graph[module] & {"fsdp_sdk.plugins", "fsdp_sdk.resolved"}, module


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = import_graph("fsdp_sdk", type_checking=True, functions=True)
    upward = sorted(
        f"{module} ({layer(module)}) -> {target} ({layer(target)})"
        for module, targets in graph.items()
        for target in targets
        if LAYERS.index(layer(target)) > LAYERS.index(layer(module))
    )
    assert upward == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_packages_import_only_the_packages_below_them(package: str) -> None:
    reaching = sorted(
        f"{module} -> {target}"
        for module, target in _imported_names(package)
        if (top := target.split(".")[0]) in PACKAGES and top != package and top not in MAY_IMPORT[package]
    )
    assert reaching == []


def test_plugins_import_core_below_its_workflows() -> None:
    """A plugin builds on core's model and its work layer (the AWS and Kubernetes knowledge), never on the
    workflows, the Client or the CLI that drive it."""
    reaching = sorted(
        f"{module} -> {target}"
        for package in ("fsdp_sdk_eksctl", "fsdp_sdk_terraform", "fsdp_sdk_observability")
        for module, target in _imported_names(package)
        if target.split(".")[0] == "fsdp_sdk" and target != "fsdp_sdk" and layer(target) not in {"model", "work"}
    )
    assert reaching == []


def test_the_layer_rules_see_a_breach() -> None:
    """The rules are not blind: an import from the work layer up to the Client, and one from the trainer into
    core, would be found."""
    assert LAYERS.index(layer("fsdp_sdk.client")) > LAYERS.index(layer("fsdp_sdk.k8s.render"))
    assert layer("fsdp_sdk.cli.job") == "cli" and layer("fsdp_sdk.workflows.jobs") == "workflows"
    assert "fsdp_sdk" not in MAY_IMPORT["fsdp_trainer"]
    assert any(target == "fsdp_trainer.config" for _module, target in _imported_names("fsdp_sdk"))


#: The rendering modules of ``aws/`` and ``k8s/``: pure (configuration in, plain data out), so ``--dry-run`` and the
#: tests see exactly what would be applied. They reach no module that acts: one that imports a client library of
#: AWS or Kubernetes, runs a process or reads the machine's processes.
PURE = {
    "fsdp_sdk.aws.arn",
    "fsdp_sdk.aws.checkpoint_plan",
    "fsdp_sdk.aws.eks",
    "fsdp_sdk.k8s.cluster_objects",
    "fsdp_sdk.k8s.idle",
    "fsdp_sdk.k8s.job_pods",
    "fsdp_sdk.k8s.render",
    "fsdp_sdk.k8s.retry",
    "fsdp_sdk.k8s.trainer_v2",
    "fsdp_sdk.k8s.validate",
}
ACTING_LIBRARIES = {"boto3", "botocore", "kubernetes", "psutil", "requests", "subprocess", "urllib3"}


def _acting_modules() -> set[str]:
    """The modules of ``fsdp_sdk`` that import an acting library themselves (at any level, type-only aside)."""
    acting = set()
    for name, path in _modules("fsdp_sdk").items():
        for node in _imports(_tree(path).body, type_checking=False, functions=True):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not getattr(node, "level", 0) and {n.split(".")[0] for n in names} & ACTING_LIBRARIES:
                acting.add(name)
    return acting


def test_rendering_reaches_nothing_that_acts() -> None:
    graph = import_graph("fsdp_sdk", functions=True)
    acting = _acting_modules()
    reached: dict[str, list[str]] = {}
    for module in sorted(PURE):
        seen, todo = set(), [module]
        while todo:
            for target in graph[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        if seen & acting or module in acting:
            reached[module] = sorted(seen & acting)
    assert reached == {}
    assert {"fsdp_sdk.aws.session", "fsdp_sdk.k8s.kube", "fsdp_sdk.aws.checkpoint_bucket"} <= acting | {
        m for m in graph if graph[m] & {"fsdp_sdk.aws.session"}
    }
