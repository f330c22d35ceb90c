"""`make run ARM=.. SEED=.. PROTOCOL=..`: the Hydra app that runs one arm x seed.

    python -m harness.run protocol=smoke arm=C seed=1                 # one run
    python -m harness.run -m protocol=smoke arm=A,B,C seed=1,2 \\
        hydra/launcher=joblib                                         # every arm x seed, in parallel
    python -m harness.run -m ... hydra/launcher=submitit_slurm       # on a SLURM cluster

conf/run.yaml holds how to run (device, paths, tracking, launcher); the protocol holds what.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.protocol import PROTOCOL_FILES, load_protocol

RUN_KEYS = {"protocol", "arm", "seed", "device", "results_dir", "tracking_uri", "progress", "torch_threads",
            "autocast", "compile"}


def refuse_frozen_overrides(argv: list[str]) -> None:
    """An override that would change frozen content is refused with the file that freezes it."""
    protocol = next((a.split("=", 1)[1] for a in argv if a.startswith("protocol=")), "smoke")
    frozen = {f.removesuffix(".yaml") for f in PROTOCOL_FILES}
    for arg in argv:
        if "=" not in arg or arg.startswith("-"):
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key.startswith("hydra") or key in RUN_KEYS:
            continue
        head = key.split(".")[0]
        if head in frozen:
            raise SystemExit(f"refused: '{key}' is frozen in protocols/{protocol}/{head}.yaml; "
                             f"a changed protocol is a new protocol (copy it to protocols/<new name> and freeze it)")
        raise SystemExit(f"refused: unknown run setting '{key}'; conf/run.yaml accepts {sorted(RUN_KEYS)}")


@hydra.main(config_path="../conf", config_name="run", version_base="1.3")
def main(cfg: DictConfig) -> str:
    from harness.model import AUTOCAST_CHOICES
    from harness.runner import run
    if cfg.autocast not in AUTOCAST_CHOICES:
        raise SystemExit(f"conf/run.yaml: autocast={cfg.autocast!r}: expected one of {list(AUTOCAST_CHOICES)}")
    os.environ["HARNESS_AUTOCAST"] = str(cfg.autocast)  # read by harness.model.Speed
    os.environ["HARNESS_COMPILE"] = "1" if cfg.compile else "0"
    load_protocol(cfg.protocol)  # clear error for an unknown or malformed protocol before anything else
    rdir = run(cfg.protocol, cfg.arm, int(cfg.seed), Path(cfg.results_dir), device=cfg.device,
               tracking_uri=cfg.tracking_uri, progress=bool(cfg.progress), threads=int(cfg.torch_threads))
    print(f"sealed: {rdir}")
    return str(rdir)


if __name__ == "__main__":
    refuse_frozen_overrides(sys.argv[1:])
    main()
