"""An S3-compatible server on loopback (moto's server mode), for tests of ``s3://`` storage.

S3 is an external service: the one kind of fake the suite allows, and then as a real HTTP
server that pyarrow, Ray Train and Ray Data reach the way they reach AWS: through the
``AWS_ENDPOINT_URL`` of their environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from ray_cluster import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "xmr-test",
    "AWS_SECRET_ACCESS_KEY": "xmr-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    """``python -m moto.server`` on 127.0.0.1 at a free port; :attr:`env` reaches it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> S3Server:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {self.endpoint}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)

    def new_bucket(self) -> str:
        """Create an empty bucket; its ``s3://`` URI."""
        import pyarrow.fs as pafs

        name = f"xmr-{uuid.uuid4().hex[:12]}"
        filesystem = pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region=CREDENTIALS["AWS_DEFAULT_REGION"],
            allow_bucket_creation=True,
        )
        filesystem.create_dir(name)
        return f"s3://{name}"


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """A started :class:`S3Server`, stopped on exit."""
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


def with_s3_env(server: S3Server) -> dict[str, str]:
    """This process's environment plus what reaches ``server``."""
    return {**os.environ, **server.env}
