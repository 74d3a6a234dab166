"""A ``docker`` for the rehearsal: ``build`` builds the image as :mod:`rehearsal.image` does (the context's own
Dockerfile and trainer copy, the build arguments given), ``login`` takes the password on stdin, ``tag`` names an
image again, ``push`` puts its manifest in the registry's repository (moto's ECR through ``AWS_ENDPOINT_URL``), as
the real client leaves it: ``describe_images`` then finds the tag.

Which environment each image reference is goes to ``<state>/images.json``: the kubelet stand-in runs a pod's
container in the environment of its image, and an image that was never pushed cannot be pulled.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

_SCRIPT = """#!{python}
import sys
sys.path[:0] = [{tests!r}]
from rehearsal.docker_standin import main
sys.exit(main(sys.argv[1:], state={state!r}))
"""


def install(bin_dir: Path, state: Path) -> Path:
    """Write the ``docker`` executable into ``bin_dir``; its records go under ``state``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "docker"
    path.write_text(
        _SCRIPT.format(python=sys.executable, tests=str(Path(__file__).resolve().parents[1]), state=str(state))
    )
    path.chmod(0o755)
    return path


def images(state: Path) -> dict[str, dict[str, str]]:
    """Image reference -> ``{"venv", "pushed"}`` (what was built, tagged and pushed)."""
    path = state / "images.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save(state: Path, table: dict[str, dict[str, str]]) -> None:
    (state / "images.json").write_text(json.dumps(table, indent=1))


def main(argv: list[str], *, state: str) -> int:
    root = Path(state)
    with (root / "calls.jsonl").open("a") as log:
        log.write(json.dumps({"tool": "docker", "argv": argv}) + "\n")
    table = images(root)
    command = argv[0] if argv else ""
    if command == "build":
        ref = argv[argv.index("-t") + 1]
        dockerfile = Path(argv[argv.index("-f") + 1])
        context = Path(argv[-1])
        args = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--build-arg")
        if dockerfile.parent != context or not (context / "trainer" / "pyproject.toml").is_file():
            print(f"ERROR: failed to solve: {dockerfile}: the context {context} lacks trainer/", file=sys.stderr)
            return 1
        from rehearsal.image import build_image_venv

        print(f"#1 building {ref} from {dockerfile}", flush=True)
        venv = build_image_venv(context / "trainer", build_args=args)
        table[ref] = {"venv": str(venv), "pushed": ""}
        _save(root, table)
        print(f"#2 naming to docker.io/library/{ref} done", flush=True)
        return 0
    if command == "login":
        if "--password-stdin" not in argv or not sys.stdin.read().strip():
            print("Error: Cannot perform an interactive login from a non TTY device", file=sys.stderr)
            return 1
        print("Login Succeeded")
        return 0
    if command == "tag":
        source, target = argv[1], argv[2]
        if source not in table:
            print(f"Error response from daemon: No such image: {source}", file=sys.stderr)
            return 1
        table[target] = dict(table[source])
        _save(root, table)
        return 0
    if command == "push":
        ref = argv[1]
        if ref not in table:
            print(f"An image does not exist locally with the tag: {ref}", file=sys.stderr)
            return 1
        match = re.fullmatch(r"(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com/([^:]+):(.+)", ref)
        if match is None:
            print(f"denied: {ref} is not an ECR repository here", file=sys.stderr)
            return 1
        import boto3

        account, region, repository, tag = match.groups()
        digest = hashlib.sha256(table[ref]["venv"].encode()).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": f"sha256:{digest}"},
            "layers": [],
        }
        ecr = boto3.session.Session(region_name=region).client("ecr")
        ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=tag, registryId=account)
        table[ref]["pushed"] = f"sha256:{digest}"
        _save(root, table)
        print(f"{tag}: digest: sha256:{digest} size: 528")
        return 0
    print(f"docker: '{command}' is not a docker command here", file=sys.stderr)
    return 1
