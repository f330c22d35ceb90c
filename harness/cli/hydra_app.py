"""`make run ARM=.. SEED=.. PROTOCOL=..` (= `python -m harness run ...`): the Hydra app that runs one
arm x seed, and every arm x seed with `-m` (what `make runs` launches).

    python -m harness run protocol=smoke arm=C seed=1                 # one run
    python -m harness run -m protocol=smoke arm=A,B,C seed=1,2 \\
        hydra/launcher=joblib                                         # every arm x seed, in parallel
    python -m harness run -m ... hydra/launcher=submitit_slurm       # on a SLURM cluster

conf/run.yaml holds how to run (device, paths, tracking, launcher); the protocol holds what. Every
override is checked before Hydra composes anything: a frozen key, an unknown key, an arm, seed or
protocol the protocol does not register, a device that is not one — each is one line on stderr,
exit status 2, and nothing is written.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from harness.core import paths
from harness.core.errors import HarnessError

RUN_KEYS = {"protocol", "arm", "seed", "device", "results_dir", "tracking", "tracking_uri", "progress",
            "torch_threads", "autocast", "compile"}
CONF_DEFAULTS = {"protocol": "main", "arm": "A", "seed": "1"}


class RunRefused(HarnessError):
    pass


# Hydra's own flags (`python -m harness run --help`); the ones that take a value list it as the next word
HYDRA_FLAGS = {"-m", "--multirun", "-h", "--help", "--hydra-help", "--version", "--resolve", "--cfg", "-c",
               "--info", "-i", "--package", "-p", "--run", "-r", "--config-path", "-cp", "--config-name", "-cn",
               "--config-dir", "-cd", "--shell-completion", "-sc", "--experimental-rerun"}
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--experimental-rerun"}


def check_words(argv: list[str]) -> None:
    """Refuse (RunRefused) a word that is neither a Hydra flag nor a key=value override, such as
    argparse-style `--arm P --seed 2`, naming the words and the right spelling."""
    bad, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word.split("=", 1)[0] in HYDRA_FLAGS:
            i += 2 if word in _FLAGS_WITH_VALUE and word == word.split("=", 1)[0] else 1
            if word in ("--info", "-i") and i < len(argv) and "=" not in argv[i] and not argv[i].startswith("-"):
                i += 1  # --info takes an optional word (config, defaults, ...)
            continue
        if word.startswith("-") or "=" not in word:
            bad.append(word)
        i += 1
    if bad:
        suggestion, words = [], list(bad)
        while words:
            w = words.pop(0)
            if w.startswith("--") and "=" not in w and words and not words[0].startswith("-"):
                suggestion.append(f"{w[2:].replace('-', '_')}={words.pop(0)}")
            elif w.startswith("--") and "=" in w:
                suggestion.append(w[2:])
        hint = f"; e.g. `python -m harness run {' '.join(suggestion)}`" if suggestion else ""
        raise RunRefused(f"run takes Hydra overrides key=value, not {' '.join(bad)}{hint} "
                         f"(`make run ARM=.. SEED=..`; -m before a sweep such as arm=A,B seed=1,2)")


def _overrides(argv: list[str]) -> dict[str, list[str]]:
    """key -> values of each override as Hydra reads it: `arm=A,B`, `arm=choice(A,B)`, `seed=range(1,3)`
    and quoted values give the values Hydra will run; flags and hydra.* skipped. RunRefused, one
    line, for what Hydra cannot parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    parser, parsed = OverridesParser.create(), []
    for word in (a for a in argv if "=" in a and not a.startswith("-")):
        try:
            parsed += parser.parse_overrides([word])
        except HydraException as e:
            raise RunRefused(f"{word}: not an override Hydra can read ({' '.join(str(e).split())})") from None
    out = {}
    for o in parsed:
        if o.is_hydra_override():
            continue
        try:
            if o.is_sweep_override():
                values = list(o.sweep_string_iterator())
            else:
                value = o.value()
                values = [_str(value) if not isinstance(value, str) else value]
        except HydraException as e:
            raise RunRefused(f"{o.input_line}: {' '.join(str(e).split())}") from None
        out[o.key_or_group] = values or [""]
    return out


def check_overrides(argv: list[str]) -> None:
    """Refuse (RunRefused) any word that is not an override, and any override that is frozen,
    unknown, or not one of its choices."""
    from harness.core.settings import check_cuda
    from harness.spec.protocol import PROTOCOL_FILES, load_protocol
    check_words(argv)
    over = _overrides(argv)
    frozen = {f.removesuffix(".yaml") for f in PROTOCOL_FILES}
    protocol_names = over.get("protocol", [CONF_DEFAULTS["protocol"]])
    for key in over:
        head = key.split(".")[0]
        if head in frozen:
            raise RunRefused(f"'{key}' is frozen in protocols/{protocol_names[0]}/{head}.yaml; a changed protocol "
                             f"is a new protocol (copy it to protocols/<new name> and freeze it)")
        if key not in RUN_KEYS:
            raise RunRefused(f"unknown run setting '{key}'; conf/run.yaml accepts {', '.join(sorted(RUN_KEYS))}")
    settings = {k: v[0] for k, v in over.items() if k not in ("protocol", "arm", "seed")}
    for k, v in settings.items():
        if len(over[k]) > 1:
            raise RunRefused(f"{k}={','.join(over[k])}: a run setting takes one value, not a sweep")
    checked = _settings_from_strings(settings)
    if checked.device != "cpu":
        check_cuda(checked.device)
    for name in protocol_names:
        protocol = load_protocol(name)  # ProtocolError names the folder it looked for and the known ones
        for arm in over.get("arm", [CONF_DEFAULTS["arm"]]):
            if arm not in protocol.arms:
                raise RunRefused(f"arm={arm!r}: expected one of {', '.join(protocol.arm_names)} "
                                 f"(registered in {protocol.dir / 'arms.yaml'})")
        for seed in over.get("seed", [CONF_DEFAULTS["seed"]]):
            if not seed.lstrip("-").isdigit() or int(seed) not in protocol.run_seeds:
                raise RunRefused(f"seed={seed!r}: expected one of {', '.join(map(str, protocol.run_seeds))} "
                                 f"(registered in {protocol.dir / 'seeds.yaml'})")


def _settings_from_strings(values: dict[str, str]):
    """RunSettings from override strings, as Hydra would type them (true/false, ints, null)."""
    from harness.core.settings import RunSettings, SettingsError
    typed = {}
    for k, v in values.items():
        if v in ("null", "~", ""):
            typed[k] = None
        elif k in ("tracking", "compile"):
            if v.lower() not in ("true", "false"):
                raise SettingsError(f"{k}={v!r}: expected true or false")
            typed[k] = v.lower() == "true"
        elif k == "progress" and v.lower() in ("true", "false"):
            typed[k] = "on" if v.lower() == "true" else "off"
        elif k == "torch_threads":
            if not v.isdigit():
                raise SettingsError(f"torch_threads={v!r}: expected an int >= 0")
            typed[k] = int(v)
        else:
            typed[k] = v
    return RunSettings.from_mapping(typed)


def check_frozen(argv: list[str]) -> None:
    """For a sweep (-m): refuse before Hydra makes any folder if a protocol it names was never frozen."""
    from harness.spec.protocol import load_protocol
    over = _overrides(argv)
    results = paths.results_dir((over.get("results_dir") or [None])[0] or None)
    for name in over.get("protocol", [CONF_DEFAULTS["protocol"]]):
        protocol = load_protocol(name)
        if not paths.lock_path(results, protocol.name).exists():
            raise RunRefused(f"protocol '{protocol.name}' is not frozen ({paths.lock_path(results, protocol.name)} "
                             f"missing): run `{paths.command_hint('freeze', protocol.name, results)}` first")


def check_single_run(argv: list[str]) -> None:
    """For one run (not -m): refuse before anything is written if an override sweeps (that needs
    -m), the protocol was never frozen or the run is already sealed."""
    from harness.core import records
    from harness.spec.protocol import load_protocol
    over = _overrides(argv)
    sweeps = [f"{k}={','.join(v)}" for k, v in over.items() if len(v) > 1]
    if sweeps:
        raise RunRefused(f"{' '.join(sweeps)} is a sweep: add -m (python -m harness run -m ...) or give one value")
    protocol = load_protocol(over.get("protocol", [CONF_DEFAULTS["protocol"]])[0])
    arm, seed = over.get("arm", [CONF_DEFAULTS["arm"]])[0], int(over.get("seed", [CONF_DEFAULTS["seed"]])[0])
    results = paths.results_dir((over.get("results_dir") or [None])[0] or None)
    if not paths.lock_path(results, protocol.name).exists():
        raise RunRefused(f"protocol '{protocol.name}' is not frozen ({paths.lock_path(results, protocol.name)} "
                         f"missing): run `{paths.command_hint('freeze', protocol.name, results)}` first")
    rdir = paths.run_dir(results, protocol.name, arm, seed)
    if records.is_sealed(rdir):
        raise RunRefused(f"{protocol.name} {arm} seed {seed} is sealed ({rdir}): a sealed run is never rerun or "
                         f"overwritten; `{paths.command_hint('readout', protocol.name, results)}` reads it out")


def run_one(cfg) -> str:
    """The job: one arm x seed to a sealed run directory. In a sweep, a sealed run is skipped and a
    refused one reported, so that the other jobs go on; the caller (`runs`) checks every run ended sealed."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.core import records
    from harness.core.timing import duration, stamped
    from harness.running.runner import run
    from harness.spec.protocol import load_protocol
    settings = _settings_from_strings({k: _str(cfg[k]) for k in RUN_KEYS - {"protocol", "arm", "seed"}})
    protocol = load_protocol(cfg.protocol)
    arm, seed = str(cfg.arm), int(cfg.seed)
    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    tag = f"[run] {protocol.name} {arm} seed {seed}"
    rdir = paths.run_dir(settings.results_dir, protocol.name, arm, seed)
    if sweep and records.is_sealed(rdir):
        print(f"{tag}: sealed already, skipped", flush=True)
        return str(rdir)
    say = stamped()
    say(f"{tag}: started")
    t0 = time.perf_counter()
    try:
        rdir = run(str(cfg.protocol), arm, seed, settings=settings)
    except HarnessError as e:
        if not sweep:  # Hydra would print a traceback for an exception: a refusal is one line, status 2
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        print(f"{tag}: refused: {e}", file=sys.stderr, flush=True)
        return f"refused: {e}"
    say(f"{tag}: sealed in {duration(time.perf_counter() - t0)} ({rdir})")
    return str(rdir)


def _str(v) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def main(argv: list[str]) -> int:
    """Check every override, then hand over to Hydra (argv as Hydra reads it)."""
    import hydra
    from omegaconf import OmegaConf
    check_overrides(argv)
    inspecting = any(a.startswith(("--cfg", "-c", "--help", "-h", "--info", "--hydra-help", "--version", "--resolve"))
                     for a in argv)
    if "-m" in argv or "--multirun" in argv:
        if not inspecting:
            check_frozen(argv)
    elif not inspecting:
        check_single_run(argv)
    if not OmegaConf.has_resolver("results"):
        OmegaConf.register_new_resolver("results", lambda v: str(paths.results_dir(v)))
        OmegaConf.register_new_resolver("protocol_name", lambda v: Path(str(v)).name)
    app = hydra.main(config_path=str(paths.PROJECT_ROOT / "conf"), config_name="run", version_base="1.3")(run_one)
    sys.argv = ["python -m harness run", *argv]
    app()
    return 0

