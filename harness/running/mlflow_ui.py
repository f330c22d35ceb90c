"""The MLflow UI as `make ui` serves it: MLflow's own server, whose page opens in MLflow 3's
model-training view ("Model training": runs, their charts, models) rather than its GenAI one.

MLflow 3's UI does not choose that view from the experiment: it reads the link's `?workflowType=`,
else what the browser keeps in its local storage for the server's address (the key
"mlflow.workflowType_v1", JSON), which starts at GenAI until the user flips the sidebar's toggle.
This server's page sets that key to the model-training view before MLflow's script runs, only where
the browser holds none, so a choice made with the toggle stands. It does the same for the one other
first-visit default that hides the runs: the assistant panel MLflow opens on a local server's first
load (it takes a third of the page) stays closed until asked for. No usage data leaves the machine:
MLflow's telemetry is off (MLFLOW_DISABLE_TELEMETRY, server and page) and the page's own telemetry
setting starts off, with its banner about it dismissed.

The server is read-only unless started with HARNESS_UI_WRITABLE=1 (`make ui UI_WRITABLE=1`): the
harness writes results owner-only, and MLflow's own server lets anyone who reaches its port upload
artifacts (a PUT under mlartifacts/), create or delete experiments and runs, and log to them. ReadOnly
answers 403 to every request that is not a GET, HEAD or OPTIONS, except the POSTs MLflow's page reads
with (READ_POSTS: searches, and the GraphQL endpoint while its every mutation is a search); deny by
default, so an endpoint a later MLflow adds is refused until it is listed. It binds to loopback, as
MLflow does unless told --host.

MLflow runs it as a server app (pyproject's `mlflow.app` entry point "harness"):
`mlflow ui --app-name harness ...`; everything else is MLflow's server unchanged.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

# no usage data leaves this machine: MLflow's own switch, before MLflow is imported (`make ui` sets it too, for
# the server's command line); the page's own telemetry and its banner are BROWSER_DEFAULTS'
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"

from mlflow.server import app as flask_app  # noqa: E402  (after the environment is set)
from mlflow.server.fastapi_app import app as mlflow_app  # noqa: E402  (what MLflow's server runs: flask_app, mounted)

# local-storage key -> value, as MLflow's UI stores them (JSON): set where the browser has none
BROWSER_DEFAULTS = {
    "mlflow.workflowType_v1": "machine_learning",
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True,
    "mlflow.settings.telemetry.enabled_v1": False,      # the page sends no usage data (its settings can turn it on)
    "mlflow.telemetry.info.alert.dismissed_v1": True,   # so its banner about collecting it has nothing to say
}
_INDEX_VIEW = "serve"  # MLflow's view that answers "/" with the UI's index.html
_MARK = "<head>"


def defaults_script(defaults: dict = BROWSER_DEFAULTS) -> str:
    """A <script> that stores each default whose key the browser's local storage lacks; a browser
    that refuses storage (private mode) gets MLflow's own defaults."""
    stored = json.dumps({k: json.dumps(v) for k, v in defaults.items()}, sort_keys=True)
    return ("<script>(function(){try{var d=" + stored + ";for(var k in d){if(localStorage.getItem(k)===null)"
            "{localStorage.setItem(k,d[k]);}}}catch(e){}})();</script>")


def page(index_html: str) -> str:
    """MLflow's index.html with defaults_script first in its <head>, before the UI's own script."""
    if _MARK not in index_html:
        raise ValueError(f"MLflow's index.html has no {_MARK}: cannot set the UI's defaults (MLflow changed its page?)")
    return index_html.replace(_MARK, _MARK + defaults_script(), 1)


def _serve_page():
    index = Path(flask_app.static_folder) / "index.html"
    if not index.is_file():  # a source install without the built UI: MLflow's own explanation
        return _mlflow_serve()
    return flask_app.response_class(page(index.read_text()), mimetype="text/html")


_mlflow_serve = flask_app.view_functions[_INDEX_VIEW]
flask_app.view_functions[_INDEX_VIEW] = _serve_page


# ---------------------------------------------------------------- read-only unless asked

WRITABLE_ENV = "HARNESS_UI_WRITABLE"  # "1": MLflow's server as it is, writes included
READ_METHODS = ("GET", "HEAD", "OPTIONS")
# the POSTs that only read (MLflow's page searches by POST), under /api/ and /ajax-api/
READ_POSTS = re.compile(r"^/(?:ajax-)?api/[23]\.0/?mlflow/(?:runs/search|experiments/search|experiments/search-datasets|"
                        r"logged-models/search|datasets/search|traces/search|issues/search|prompt-optimization/jobs/search|"
                        r"registered-models/get-latest-versions|traces/batchGetInfos|traces/metrics|"
                        r"traces/calculate-filter-correlation)$")
GRAPHQL = "/graphql"
_SEARCH_MUTATIONS = re.compile(r"^(?:mlflowSearch\w+|testMutation)$")  # MLflow's GraphQL "mutations" that only read


def graphql_reads_only() -> bool:
    """Whether every mutation of MLflow's GraphQL schema is a search (MLflow's page posts its run queries
    there); False when the schema cannot be read or holds another mutation."""
    try:
        from mlflow.server.graphql.graphql_schema_extensions import schema
        fields = schema.graphql_schema.mutation_type.fields
    except Exception:  # another MLflow: refuse GraphQL posts rather than guess
        return False
    return all(_SEARCH_MUTATIONS.match(name) for name in fields)


def reads(method: str, path: str, graphql: bool) -> bool:
    """Whether a request only reads: a GET, HEAD or OPTIONS, or a POST to a listed search (a path with
    '..' or '//' never counts as one)."""
    if method in READ_METHODS:
        return True
    if method != "POST" or ".." in path or "//" in path:
        return False
    return bool(READ_POSTS.match(path)) or (graphql and path == GRAPHQL)


class ReadOnly:
    """ASGI middleware: a request that would write (reads() is False) gets 403 with MLflow's error JSON,
    before MLflow sees it; a websocket is closed unopened. Everything else goes to `inner` unchanged."""

    def __init__(self, inner):
        self.inner = inner
        self.graphql = graphql_reads_only()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] == "http" and not reads(scope["method"], scope["path"], self.graphql):
            body = json.dumps({"error_code": "PERMISSION_DENIED",
                               "message": f"this MLflow server is read-only ({scope['method']} {scope['path'][:200]}); "
                                          f"`make ui UI_WRITABLE=1` serves it writable"}).encode()
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.inner(scope, receive, send)


app = mlflow_app if os.environ.get(WRITABLE_ENV) == "1" else ReadOnly(mlflow_app)  # what `--app-name harness` serves
