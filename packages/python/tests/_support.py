"""Shared by the tests: the live creditgate the npm test runner started (packages/client/test/python.test.ts),
tenants provisioned through its operator API, and small stand-in HTTP servers."""

from __future__ import annotations

import json
import os
import sys
import threading
import unittest
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "packages" / "python" / "src"))

from creditgate import Client  # noqa: E402

BASE_URL = os.environ.get("CG_BASE_URL", "")
ADMIN_KEY = os.environ.get("CG_ADMIN_KEY", "")
SERVICE_KEY = os.environ.get("CG_SERVICE_KEY", "")

live = unittest.skipUnless(BASE_URL and ADMIN_KEY and SERVICE_KEY, "needs a live creditgate (CG_BASE_URL, CG_ADMIN_KEY, CG_SERVICE_KEY): run through npm test")


def admin(method: str, path: str, body: Optional[dict[str, Any]] = None) -> Any:
    request = urllib.request.Request(
        BASE_URL.rstrip("/") + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"x-admin-key": ADMIN_KEY, "content-type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


@dataclass
class Tenant:
    organization_id: str
    deployment_id: str
    deployment_secret: str
    user_id: str
    api_key: str


def create_tenant(
    tier: str = "launch", *, purchased: int = 0, monthly_credits: Optional[int] = None, scopes: tuple[str, ...] = ("read", "write")
) -> Tenant:
    """A fresh organization with its primary deployment at `tier`, an owner and an API key."""
    slug = f"py-{uuid.uuid4().hex[:20]}"
    created = admin("POST", "/api/v1/admin/organizations", {"name": f"Org {slug}", "slug": slug, "tier": tier, "owner_email": f"{slug}@example.com"})
    org, deployment = created["organization"], created["deployment"]
    key = admin("POST", f"/api/v1/admin/organizations/{org['id']}/api-keys", {"name": "python tests", "scopes": list(scopes)})
    if purchased:
        admin("POST", f"/api/v1/admin/deployments/{deployment['id']}/credits", {"amount": purchased, "reason": "python tests"})
    if monthly_credits is not None:
        admin("PUT", f"/api/v1/admin/deployments/{deployment['id']}/overrides", {"monthly_credits": monthly_credits})
    return Tenant(org["id"], deployment["id"], deployment["secret"], created["owner_user_id"], key["key"])


def map_tool(action: str, prefix: str = "py-tool") -> str:
    """A fresh tool name mapped to `action` through the operator API."""
    tool = f"{prefix}-{uuid.uuid4().hex[:12]}"
    admin("PUT", f"/api/v1/admin/tool-actions/{tool}", {"action": action})
    return tool


def balance(tenant: Tenant) -> dict[str, Any]:
    return dict(admin("GET", f"/api/v1/admin/deployments/{tenant.deployment_id}")["balance"])


def stdio(tenant: Tenant, **options: Any) -> Client:
    return Client(api_key=tenant.api_key, base_url=BASE_URL, retries=0, **options)


def service(**options: Any) -> Client:
    return Client(service_key=SERVICE_KEY, base_url=BASE_URL, retries=0, **options)


def deployment(tenant: Tenant, **options: Any) -> Client:
    return Client(deployment_id=tenant.deployment_id, deployment_secret=tenant.deployment_secret, base_url=BASE_URL, retries=0, **options)


# ---- stand-in servers ----

Reply = tuple[int, dict[str, str], bytes]


class StandIn:
    """An HTTP server on loopback that answers from a script (one reply per request, the last
    repeated) or from a handler function; it records what it received."""

    def __init__(self, replies: Optional[list[Reply]] = None, handler: Optional[Callable[["StandIn", BaseHTTPRequestHandler, bytes], Optional[Reply]]] = None) -> None:
        self.replies = list(replies or [])
        self.handler = handler
        self.requests: list[dict[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                stand_in.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
                if stand_in.handler is not None:
                    reply = stand_in.handler(stand_in, self, body)
                else:
                    index = min(len(stand_in.requests), len(stand_in.replies)) - 1
                    reply = stand_in.replies[index]
                if reply is None:  # drop the connection without an answer
                    self.close_connection = True
                    return
                status, headers, payload = reply
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve
            do_POST = _serve
            do_PUT = _serve
            do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def json_reply(status: int, body: Any, headers: Optional[dict[str, str]] = None) -> Reply:
    return status, {"content-type": "application/json", **(headers or {})}, json.dumps(body).encode()


def forward(handler: BaseHTTPRequestHandler, body: bytes) -> Reply:
    """Sends the request on to the live service and returns its answer."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "content-length", "connection")}
    request = urllib.request.Request(BASE_URL.rstrip("/") + handler.path, data=body or None, headers=headers, method=handler.command)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, {"content-type": "application/json", **{k: v for k, v in response.headers.items() if k.lower() == "idempotent-replayed"}}, response.read()
    except urllib.error.HTTPError as err:
        return err.code, {"content-type": "application/json"}, err.read()


class Sleeps:
    """A sleep that records its waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
