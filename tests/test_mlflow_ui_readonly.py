"""`make ui` serves the results read-only: MLflow's page reads (GETs and its search POSTs), and nothing
that writes reaches MLflow's server (no artifact upload, no experiment or run created), on loopback;
`make ui UI_WRITABLE=1` is MLflow's server as it is."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness import PROJECT_ROOT
from harness.running import mlflow_ui
from harness.running.mlflow_ui import ReadOnly, reads

WRITES = [("POST", "/api/2.0/mlflow/experiments/create"), ("POST", "/ajax-api/2.0/mlflow/runs/create"),
          ("POST", "/ajax-api/2.0/mlflow/runs/log-batch"), ("POST", "/api/2.0/mlflow/experiments/delete"),
          ("PUT", "/api/2.0/mlflow-artifacts/artifacts/0/x.txt"), ("DELETE", "/api/2.0/mlflow-artifacts/artifacts/x"),
          ("PATCH", "/api/2.0/mlflow/registered-models/update"), ("POST", "/api/2.0/mlflow-artifacts/mpu/create/x"),
          ("POST", "/v1/traces"), ("POST", "/ajax-api/2.0/mlflow/runs/search/../create"),
          ("POST", "/ajax-api/2.0/mlflow/runs/search/"), ("POST", "/api/3.0/mlflow/review-queues/get-or-create-user")]
READS = [("GET", "/"), ("GET", "/ajax-api/2.0/mlflow/experiments/search"), ("HEAD", "/health"),
         ("OPTIONS", "/ajax-api/2.0/mlflow/runs/create"), ("POST", "/ajax-api/2.0/mlflow/runs/search"),
         ("POST", "/ajax-api/2.0/mlflow/experiments/search"), ("POST", "/api/2.0/mlflow/logged-models/search"),
         ("POST", "/ajax-api/3.0/mlflow/traces/search"), ("GET", "/api/2.0/mlflow-artifacts/artifacts/0/x.txt")]


@pytest.mark.parametrize("method, path", WRITES)
def test_a_request_that_writes_is_not_a_read(method, path):
    assert not reads(method, path, graphql=True)


@pytest.mark.parametrize("method, path", READS)
def test_what_the_page_reads_with_is_a_read(method, path):
    assert reads(method, path, graphql=True)


def test_graphql_posts_only_while_every_mutation_of_mlflows_schema_is_a_search():
    assert mlflow_ui.graphql_reads_only()  # this MLflow's: mlflowSearchRuns, mlflowSearchDatasets, testMutation
    assert reads("POST", "/graphql", graphql=True) and not reads("POST", "/graphql", graphql=False)


def test_the_middleware_answers_403_before_mlflow_sees_a_write():
    seen = []

    async def inner(scope, receive, send):
        seen.append((scope["method"], scope["path"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def call(method, path):
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}
        asyncio.run(ReadOnly(inner)({"type": "http", "method": method, "path": path}, receive, send))
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    status, body = call("PUT", "/api/2.0/mlflow-artifacts/artifacts/0/x.txt")
    assert status == 403 and json.loads(body)["error_code"] == "PERMISSION_DENIED" and seen == []
    assert "UI_WRITABLE=1" in json.loads(body)["message"]
    assert call("POST", "/ajax-api/2.0/mlflow/runs/search") == (200, b"ok")
    assert seen == [("POST", "/ajax-api/2.0/mlflow/runs/search")]


# ---------------------------------------------------------------- the server as `make ui` starts it

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(method: str, url: str, body: bytes | None = None, json_body=None) -> tuple[int, bytes]:
    data = json.dumps(json_body).encode() if json_body is not None else body
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if json_body is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class _Server:
    """`make ui RESULTS=.. PORT=..` (without remaking the venv's stamp), in its own session so the whole
    group (make, mlflow, uvicorn's workers) stops by this process's id."""

    def __init__(self, results, writable: bool, log):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HARNESS_UI_WRITABLE"}
        cmd = ["make", "-s", "-o", ".venv/.installed", "ui", f"RESULTS={results}", f"PORT={self.port}"]
        self.proc = subprocess.Popen(cmd + (["UI_WRITABLE=1"] if writable else []), cwd=PROJECT_ROOT, env=env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while True:
            assert self.proc.poll() is None, f"make ui ended with status {self.proc.returncode}"
            try:
                if _request("GET", self.url + "/health")[0] == 200:
                    return
            except OSError:
                pass
            assert time.time() < deadline, "make ui did not answer in time"
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


@pytest.fixture
def server(tmp_path):
    """`make ui` on an empty results folder, read-only (as it starts by default), stopped afterwards."""
    (tmp_path / "results").mkdir()
    server = _Server(tmp_path / "results", False, open(tmp_path / "ui.log", "wb"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _experiment(server, name: str) -> int:
    return _request("GET", f"{server.url}/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name={name}")[0]


def test_make_ui_reads_and_refuses_every_write(server, tmp_path):
    status, page = _request("GET", server.url + "/")
    assert status == 200 and mlflow_ui.defaults_script().encode() in page
    status, body = _request("POST", server.url + "/ajax-api/2.0/mlflow/experiments/search", json_body={"max_results": 5})
    assert status == 200 and [e["name"] for e in json.loads(body)["experiments"]] == ["Default"]
    assert _request("POST", server.url + "/ajax-api/2.0/mlflow/runs/search", json_body={"experiment_ids": ["0"]})[0] == 200

    status, body = _request("POST", server.url + "/api/2.0/mlflow/experiments/create", json_body={"name": "planted"})
    assert status == 403 and json.loads(body)["error_code"] == "PERMISSION_DENIED"
    assert _experiment(server, "planted") == 404  # not created
    assert _request("PUT", server.url + "/api/2.0/mlflow-artifacts/artifacts/0/planted.txt", body=b"written")[0] == 403
    assert not list((tmp_path / "results").rglob("planted.txt"))
    assert _request("POST", server.url + "/api/2.0/mlflow/runs/create", json_body={"experiment_id": "0"})[0] == 403
    assert _request("POST", server.url + "/api/2.0/mlflow/experiments/delete", json_body={"experiment_id": "0"})[0] == 403
    assert _experiment(server, "Default") == 200
    assert _listening(server.port) == {"127.0.0.1"}  # loopback only


def _listening(port: int) -> set[str]:
    """The addresses a TCP socket listens on at `port` on this machine (Linux: /proc/net/tcp, tcp6)."""
    out = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word is host-order
                out.add(socket.inet_ntop(socket.AF_INET if width == 8 else socket.AF_INET6, words))
    return out


@pytest.mark.parametrize("flag, exported", [([], "0"), (["UI_WRITABLE=0"], "0"), (["UI_WRITABLE=1"], "1")])
def test_make_ui_hands_the_writable_flag_to_the_server(tmp_path, flag, exported):
    """The recipe's environment, seen by a stand-in for the venv's mlflow (VENV= points make at it)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "mlflow").write_text('#!/bin/sh\necho "writable=$HARNESS_UI_WRITABLE $1"\n')
    (venv / "bin" / "mlflow").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_UI_WRITABLE"}
    out = subprocess.run(["make", "-s", "-o", f"{venv}/.installed", "ui", f"VENV={venv}", f"RESULTS={tmp_path}", *flag],
                         cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"writable={exported} ui\n", out.stdout + out.stderr


@pytest.mark.parametrize("value, wrapped", [(None, True), ("1", False)])
def test_the_server_app_is_mlflows_own_only_when_asked(value, wrapped):
    """What `--app-name harness` serves: MLflow's app behind ReadOnly, or (HARNESS_UI_WRITABLE=1) MLflow's app."""
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_UI_WRITABLE"} | ({"HARNESS_UI_WRITABLE": value} if value else {})
    code = ("from harness.running import mlflow_ui as u; "
            "print(type(u.app).__name__, u.app is u.mlflow_app or u.app.inner is u.mlflow_app)")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split() == ["ReadOnly" if wrapped else "FastAPI", "True"], out.stdout + out.stderr
