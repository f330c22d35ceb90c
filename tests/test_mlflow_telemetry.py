"""`make ui` sends no usage data and shows no telemetry banner: MLflow's switch is set for the server, and
the page's own telemetry setting and its banner's "dismissed" flag are stored under this MLflow's keys."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow

from harness import PROJECT_ROOT
from harness.running import mlflow_ui


def test_the_server_process_has_mlflows_telemetry_off():
    """A process that loads the UI app (as `mlflow ui --app-name harness` does), in an environment where
    MLflow would otherwise collect (no CI or test variable), finds telemetry off and no telemetry client."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS")
           and not k.startswith(("MLFLOW_DISABLE", "DO_NOT_TRACK"))}
    code = ("from harness.running import mlflow_ui; from mlflow.telemetry.utils import is_telemetry_disabled; "
            "from mlflow.telemetry import get_telemetry_client; "
            "print(is_telemetry_disabled(), get_telemetry_client() is None)")
    p = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True"]
    # and the command line `make ui` runs has it before MLflow's CLI starts (its start is an event too)
    assert re.search(r"^ui: export MLFLOW_DISABLE_TELEMETRY = true$", (PROJECT_ROOT / "Makefile").read_text(), re.M)


def test_the_page_starts_with_its_telemetry_off_and_its_banner_dismissed():
    stored = json.loads(mlflow_ui.defaults_script().split("var d=", 1)[1].split(";", 1)[0])
    assert json.loads(stored["mlflow.settings.telemetry.enabled_v1"]) is False
    assert json.loads(stored["mlflow.telemetry.info.alert.dismissed_v1"]) is True
    # the keys are this MLflow's: the banner ("mlflow.home.telemetry-alert") shows until the flag its module
    # names is stored true, and the setting's key is the one beside it; both kept as `${key}_v${version}`
    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    text = "".join(p.read_text(errors="replace") for p in bundle.glob("*.js"))
    assert '="mlflow.settings.telemetry.enabled"' in text and '="mlflow.telemetry.info.alert.dismissed",' in text
    assert 'componentId:"mlflow.home.telemetry-alert"' in text and "`${e}_v${t}`" in text
    constants = re.search(r'const \w=1,\w="mlflow\.settings\.telemetry\.enabled",\w="mlflow\.telemetry\.info\.alert\.'
                          r'dismissed",\w=1', text)
    assert constants, "the telemetry keys' versions are no longer 1 in this MLflow"
