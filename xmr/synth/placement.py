"""How many workers each stage of a D′ build gets, and with what resources, on the executor at
hand."""

from __future__ import annotations

from dataclasses import dataclass

from xmr.pipeline import Executor, Resources


@dataclass(frozen=True)
class Placement:
    """How many actors each stage gets, and with what resources, on this cluster.

    GPU stages (SD fill, captioner, detector) split the GPUs evenly, at most ``gpus_per_actor``
    per actor; CPU stages get one core per actor.
    """

    cpus: int
    gpus: int
    gpu_stages: int
    gpus_per_actor: float

    @classmethod
    def on(cls, executor: Executor, gpu_stages: int, gpus_per_actor: float) -> Placement:
        """The placement of ``gpu_stages`` GPU stages on ``executor``'s cores and GPUs."""
        return cls(executor.cpus, executor.gpus, gpu_stages, gpus_per_actor)

    @property
    def share(self) -> float:
        """GPUs per actor of a GPU stage."""
        return min(self.gpus_per_actor, self.gpus / max(self.gpu_stages, 1))

    def resources(self, on_gpu: bool) -> Resources:
        return Resources(cpus=1.0, gpus=self.share) if on_gpu and self.gpus else Resources(1.0)

    def actors(self, requested: int | None, on_gpu: bool, cpu_default: int) -> int:
        """``requested``, else the GPU stage's share of the GPUs, else ``cpu_default``."""
        if requested is not None:
            return requested
        if on_gpu and self.gpus:
            return max(1, int(self.gpus / max(self.gpu_stages, 1) / self.share))
        return max(1, cpu_default)


def stage_device(resources: Resources) -> str:
    """Where a stage with ``resources`` runs its model: ``cuda`` with a GPU share, else ``cpu``."""
    return "cuda" if resources.gpus > 0 else "cpu"
