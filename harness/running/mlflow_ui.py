"""The MLflow UI as `make ui` serves it: MLflow's own server, whose page opens in MLflow 3's
model-training view ("Model training": runs, their charts, models) rather than its GenAI one.

MLflow 3's UI does not choose that view from the experiment: it reads the link's `?workflowType=`,
else what the browser keeps in its local storage for the server's address (the key
"mlflow.workflowType_v1", JSON), which starts at GenAI until the user flips the sidebar's toggle.
This server's page sets that key to the model-training view before MLflow's script runs, only where
the browser holds none, so a choice made with the toggle stands. It does the same for the one other
first-visit default that hides the runs: the assistant panel MLflow opens on a local server's first
load (it takes a third of the page) stays closed until asked for.

MLflow runs it as a server app (pyproject's `mlflow.app` entry point "harness"):
`mlflow ui --app-name harness ...`; everything else is MLflow's server unchanged.
"""
from __future__ import annotations

import json
from pathlib import Path

from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import app  # noqa: F401  (what MLflow's server runs: flask_app, mounted)

# local-storage key -> value, as MLflow's UI stores them (JSON): set where the browser has none
BROWSER_DEFAULTS = {
    "mlflow.workflowType_v1": "machine_learning",
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True,
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
