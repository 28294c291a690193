"""Fixtures of the audit tests: an S3-compatible server (moto's, a real process on loopback) and
a fresh bucket on it for each test."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from codemojex.audit.replica import S3Replica


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)  # sync fixture, outside trio
    else:
        proc.kill()
        raise RuntimeError("moto server did not start")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def s3_replica(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3Replica:
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    bucket = "audit-" + os.urandom(4).hex()
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return S3Replica(bucket, "cm", endpoint_url=s3_endpoint)
