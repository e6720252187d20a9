"""A real S3-compatible server for the tiered-storage tests and benchmark: moto's standalone server
(`python -m moto.server`) as a subprocess on a loopback port, spoken to over HTTP; and the
broker config that points tiered storage at it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from broker.launch.process import free_port

BUCKET = "kproto-tiered"
# moto takes any credentials; given explicitly so no AWS profile of the machine is read
ACCESS_KEY, SECRET_KEY = "kproto-test-key", "kproto-test-secret"


class MotoServer:
    """`start()` runs the server (on the same port again after `kill()`), `kill()` ends it."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "MotoServer":
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"moto server not listening on {self.port} after {timeout}s")
                time.sleep(0.05)
        self.client().create_bucket(Bucket=BUCKET)
        return self

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def config(self, endpoint: str | None = None, **settings: str) -> dict[str, str]:
        """Broker config for an S3 store on this server (rsm.config.<key with dots> = value)."""
        config = {
            "log.dirs": "/nonexistent/kproto-data",
            "rsm.config.store": "s3",
            "rsm.config.bucket": BUCKET,
            "rsm.config.endpoint": endpoint or self.endpoint,
            "rsm.config.allow.http": "true",
            "rsm.config.region": "us-east-1",
            "rsm.config.access.key.id": ACCESS_KEY,
            "rsm.config.secret.access.key": SECRET_KEY,
        }
        config.update({"rsm.config." + k.replace("_", "."): v for k, v in settings.items()})
        return config
