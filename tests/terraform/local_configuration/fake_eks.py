"""Create, scale and delete an EKS cluster and node groups in the tests' moto server (local-exec provisioners).

    fake_eks.py create-cluster NAME REGION VERSION
    fake_eks.py delete-cluster NAME REGION
    fake_eks.py create-nodegroup CLUSTER REGION GROUP DESIRED MIN MAX
    fake_eks.py delete-nodegroup CLUSTER REGION GROUP

It speaks EKS's REST API to $AWS_ENDPOINT_URL with the standard library only (a provisioner runs
often; importing boto3 would cost more than the call). moto reads the region from the credential
scope of the Authorization header and does not check the signature. Deleting what does not exist
is not an error (a destroy after an interrupted create).
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request


def call(method: str, region: str, path: str, body: dict | None = None) -> int:
    request = urllib.request.Request(
        os.environ["AWS_ENDPOINT_URL"].rstrip("/") + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"AWS4-HMAC-SHA256 Credential=testing/20260101/{region}/eks/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        if method == "DELETE" and error.code == 404:
            return 404
        print(f"{method} {path}: {error.code} {error.read().decode(errors='replace')}", file=sys.stderr)
        raise SystemExit(1) from None


def main(command: str, cluster: str, region: str, *rest: str) -> int:
    if command == "create-cluster":
        call(
            "POST",
            region,
            "/clusters",
            {
                "name": cluster,
                "version": rest[0],
                "roleArn": "arn:aws:iam::123456789012:role/fsdp-sdk-test",
                "resourcesVpcConfig": {"subnetIds": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]},
            },
        )
    elif command == "delete-cluster":
        call("DELETE", region, f"/clusters/{cluster}")
    elif command == "create-nodegroup":
        group, desired, low, high = rest[0], int(rest[1]), int(rest[2]), int(rest[3])
        sleep_group, _, seconds = os.environ.get("FSDP_TF_TEST_SLEEP", "").partition(":")
        if sleep_group == group:
            time.sleep(float(seconds))
        if os.environ.get("FSDP_TF_TEST_FAIL") == group:
            print(f"simulated failure: node group {group} cannot be created", file=sys.stderr)
            return 1
        call(
            "POST",
            region,
            f"/clusters/{cluster}/node-groups",
            {
                "nodegroupName": group,
                "nodeRole": "arn:aws:iam::123456789012:role/fsdp-sdk-test-node",
                "subnets": ["subnet-0123456789abcdef0"],
                "scalingConfig": {"desiredSize": desired, "minSize": low, "maxSize": high},
            },
        )
    elif command == "delete-nodegroup":
        call("DELETE", region, f"/clusters/{cluster}/node-groups/{rest[0]}")
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
