"""`attnsel preflight`'s options once parsed and checked (cli/preflight_cmd.py builds it): the
deployment, the model's config as read once, the version object that answers (chosen once), and
where the checks run (this machine, a target named by --gpu, or a Ray cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnsel.attention.preflight.deployment import Deployment

if TYPE_CHECKING:
    from attnsel.attention.versions import RuleProfile
    from attnsel.attention.versions.choice import ProfileChoice


@dataclass(frozen=True)
class PreflightRequest:
    deployment: Deployment
    model: str  # --model as given (a path, a folder or a catalog name)
    hf_config: dict = field(compare=False, repr=False)  # its config.json, read once (standard input reads once)
    choice: ProfileChoice = field(compare=False)  # select_profile's answer: the version object and why
    gpu: str | None = None  # --gpu: a target machine instead of this one
    num_gpus: int | None = None  # --num-gpus, with --gpu
    ray: str | None = None  # --ray ADDRESS: every node of a Ray cluster
    timeout: float | None = None  # --timeout, with --ray

    @property
    def profile(self) -> RuleProfile:
        return self.choice.profile

    @property
    def world_size(self) -> int:
        """The GPUs one deployment takes: TP x PP."""
        return self.deployment.tensor_parallel_size * self.deployment.pipeline_parallel_size
