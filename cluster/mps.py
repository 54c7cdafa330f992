"""NVIDIA MPS for drafters that share a GPU: the client environment, and whether the daemon is up.

Several drafter processes on one GPU time-slice it unless the MPS control daemon runs on the node; with MPS
their kernels run concurrently. Start it on each GPU node before Ray (as the user that runs Ray):

    export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-log
    nvidia-cuda-mps-control -d          # stop with: echo quit | nvidia-cuda-mps-control

On Kubernetes the NVIDIA device plugin runs the daemon itself when its sharing config says `mps`
(k8s/overlays/gpu/device-plugin-mps.yaml). A missing daemon is reported once and never stops start-up.
"""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class MPSConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Run drafters as MPS clients (set the MPS environment for them).")
    pipe_directory: str = Field("/tmp/nvidia-mps", description="CUDA_MPS_PIPE_DIRECTORY of the node's daemon.")
    log_directory: str = Field("/tmp/nvidia-log", description="CUDA_MPS_LOG_DIRECTORY of the node's daemon.")
    active_thread_percentage: int | None = Field(None, ge=1, le=100, description="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
                                                 "per drafter: caps its share of the GPU's SMs (None: no cap).")

    def client_env(self) -> dict[str, str]:
        """Environment variables of a drafter process (empty when MPS is off)."""
        if not self.enabled:
            return {}
        env = {"CUDA_MPS_PIPE_DIRECTORY": self.pipe_directory, "CUDA_MPS_LOG_DIRECTORY": self.log_directory}
        if self.active_thread_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(self.active_thread_percentage)
        return env


def daemon_running(pipe_directory: str) -> bool:
    """The control daemon listens on a named pipe `control` in its pipe directory."""
    try:
        return stat.S_ISFIFO((Path(pipe_directory) / "control").stat().st_mode)
    except OSError:
        return False


def mps_status(cfg: MPSConfig) -> dict[str, object]:
    """What a drafter reports about MPS (and logs once when it was asked for but is not there)."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", cfg.pipe_directory)
    up = daemon_running(pipe)
    if cfg.enabled and not up:
        log.warning("MPS requested but no daemon at %s/control: drafters sharing a GPU will time-slice it "
                    "(start it with `nvidia-cuda-mps-control -d`, see cluster/mps.py)", pipe)
    return {"enabled": cfg.enabled, "daemon_running": up, "pipe_directory": pipe}
