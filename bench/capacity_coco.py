"""Capacity model: how many GPU nodes build COCO train2017's D′ and BiAug-D′ in an hour.

For each build, stage by stage: the work (images, rows, LLM requests), the seconds one actor
spends per unit, the actors that finish it in ``--hours``, and what that means in cluster.yaml's
node types (``gpu_worker``: one GPU and 8 vCPUs; ``cpu_worker``: 16 vCPUs). It prints the
``xmr synth`` stage sizes to set (``--fill-actors``, ``--detect-actors``, ``--caption-actors``,
``--llm-actors``, ``--llm-in-flight``, ``--batch-size``, ``--gpus-per-actor``) and the cluster.yaml
worker counts, and writes everything as JSON with ``--out``.

Every input is labelled MEASURED (with the command or the bench/RESULTS.md section that measured
it) or ASSUMED (with the reason and, where there is one, a public source). The GPU figures (Stable
Diffusion 2 inpainting and GroundingDINO seconds per image on an A10G) are ASSUMED: no A10G was
measured (bench/RESULTS.md has the same stages measured on an H100: 0.29 and ~0.09 s per image).
Replace them with measurements from a GPU node (``bench/bench_synth_throughput.py --fill sd``,
``bench/bench_biaug_stages.py --device cuda``) through ``--sd-seconds-per-image`` /
``--detector-seconds-per-image`` or ``--set NAME=VALUE``.

Run from the repository root:

    python bench/capacity_coco.py                                  # the model, recorded inputs
    python bench/capacity_coco.py --measure ../shared/data/coco-mini   # re-measure the CPU inputs
    python bench/capacity_coco.py --hours 2 --sd-seconds-per-image 1.6 --out capacity.json

``--measure`` runs the CPU stages of the removal build (planning, Telea and zero fills,
noun-phrase captions, shard commits) in this process on a COCO-layout folder and reads the BiAug
prompt sizes from xmr's own prompt builders; it needs ``NLTK_DATA`` where the tagger cannot be
downloaded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from xmr.data.errors import DataError
from xmr.pipeline import Resources
from xmr.pipeline.stage import Batch, rows_to_batch
from xmr.synth.biaug.config import BiAugConfig
from xmr.synth.biaug.stages import decouple_request, propose_request
from xmr.synth.config import SynthConfig
from xmr.synth.inputs import read_inputs
from xmr.synth.output import commit_shard
from xmr.synth.removal.config import RemovalConfig
from xmr.synth.removal.plan import pair_record
from xmr.synth.removal.stages import FillImages, PlanRows, WriteCaptions, plan_inputs
from xmr.text.noun_phrases import _cached_spans

COCO_TRAIN_IMAGES = 118_287  # COCO train2017 (captions_train2017.json: 591,753 captions)
MEASURE_COMMAND = "python bench/capacity_coco.py --measure ../shared/data/coco-mini"


@dataclass(frozen=True)
class Figure:
    """One input of the model: its value, unit, and where it comes from."""

    value: float
    unit: str
    kind: str  # MEASURED | ASSUMED | OVERRIDDEN
    source: str


def measured(value: float, unit: str, source: str) -> Figure:
    return Figure(value, unit, "MEASURED", source)


def assumed(value: float, unit: str, source: str) -> Figure:
    return Figure(value, unit, "ASSUMED", source)


# The recorded inputs. The MEASURED ones from MEASURE_COMMAND are the middle of three runs on
# the issue-13 machine (all 80 coco-mini images, 84 rows; 2 cores shared with other jobs, load
# average 3-12, no GPU), their range in the source; rerun it to refresh them.
RUN = f"`{MEASURE_COMMAND}`, 3 runs"
INPUTS: dict[str, Figure] = {
    "dprime_rows_per_image": measured(
        1.05,
        "rows/image",
        f"{RUN}: 84 rows from 80 images (53 images give 1-3 rows, 27 none), as "
        "`xmr synth --dataset coco --data ../shared/data/coco-mini --fill telea` wrote",
    ),
    "plan_cpu_s_per_image": measured(
        0.004, "CPU s/image", f"{RUN}: PlanRows, warm tagger, cold caption caches; 3.3-4.6 ms"
    ),
    "telea_cpu_s_per_row": measured(
        0.11, "CPU s/row", f"{RUN}: FillImages --fill telea (decode, Telea, PNG); 108-116 ms"
    ),
    "fill_overhead_cpu_s_per_row": measured(
        0.034,
        "CPU s/row",
        f"{RUN}: FillImages --fill zero (decode, mask, PNG encode: what an SD fill actor does on "
        "its one CPU around each pipeline call); 33-34 ms",
    ),
    "caption_cpu_s_per_row": measured(
        2e-6, "CPU s/row", f"{RUN}: WriteCaptions np-removal (the rewrite is made when planning)"
    ),
    "driver_s_per_row": measured(
        0.004,
        "s/row",
        f"{RUN}: pair_record + commit_shard to the local disk, median pass, wall clock; "
        "2.9-4.4 ms (0.7-0.9 ms of it CPU); the driver commits every row of a build in one "
        "process, and a shared filesystem's write speed adds to it",
    ),
    "png_bytes_per_row": measured(463_000, "bytes/row", f"{RUN}: mean PNG bytes of a D′ row"),
    "propose_prompt_tokens": measured(
        285,
        "tokens",
        f"{RUN}: mean characters of xmr's object-proposal prompt for each image's first caption "
        "/ chars_per_token",
    ),
    "decouple_prompt_tokens": measured(
        810,
        "tokens",
        f"{RUN}: mean characters of xmr's attribute prompt (the image's largest object as the "
        "one verified) / chars_per_token",
    ),
    "llm_in_flight": measured(
        16,
        "requests/actor",
        'bench/RESULTS.md "LLM client": the most requests in flight per client measured at '
        "0.85-0.95 of the ideal rate (64 was not measured cleanly on 2 loaded cores)",
    ),
    "llm_client_efficiency": measured(
        0.85,
        "share of in_flight/latency",
        'bench/RESULTS.md "LLM client": 0.85-0.89 at 16 in flight over 64 requests, 0.95 over 256',
    ),
    "llm_client_cpu_s_per_request": measured(
        0.002, "CPU s/request", 'bench/RESULTS.md "LLM client": 0.9-1.9 ms per request'
    ),
    "sd_s_per_image": assumed(
        2.0,
        "GPU s/image",
        "SD 2 inpainting, 512 px, 25 steps, fp16, one image per A10G: SD 1.5 at 512 px takes "
        "2.95 s for 50 steps on an A10 in PyTorch fp16 (DeciDiffusion model card, "
        "https://huggingface.co/Deci/DeciDiffusion-v1-0), i.e. ~1.5 s for 25; the SD 2 inpainting "
        "UNet is the same size; +30 % for the A10G (AWS's variant, assumed slower) and the "
        "inpainting pipeline's pre/post-processing; batching 8 images assumed to gain nothing "
        "(on an H100 it gains 5x: 0.29 s per image through the stage at 8 per call, "
        'bench/RESULTS.md "GPU stages on an H100")',
    ),
    "detector_s_per_image": assumed(
        0.3,
        "GPU s/image",
        "GroundingDINO Swin-T (HF grounding-dino-tiny), one COCO image with <=5 phrases: the "
        "paper reports 8.37 FPS (0.12 s) for Swin-T, users see ~0.4 s on an RTX 2080 after "
        "warm-up (https://github.com/IDEA-Research/GroundingDINO/issues/50), and the HF port is "
        "slower than the original (https://github.com/huggingface/transformers/issues/31533)",
    ),
    "biaug_rows_per_example": assumed(
        3.21,
        "rows/source example",
        "BiAug paper table 1 (/work/shared/papers/biaug-reporting-bias.txt), CC3M 300K: "
        "460,908 hard-negative pairs x 2 rows / 287,600 source examples (xmr's default "
        "--no-filter-confidence; with --filter-confidence 228,605 pairs: 1.59). Not measured: "
        "--llm oracle answers only for ToyWorld, and on ToyWorld (colour only, "
        'docs/results/biaug.md "BiAug on ToyWorld") it was 4,076 rows / 2,000 examples = 2.04',
    ),
    "captions_per_image": assumed(
        1, "examples/image", "xmr synth's default --captions-per-image 1 (a choice, not a measure)"
    ),
    "llm_ttft_s": assumed(
        0.5,
        "s",
        "time to the first token of a small hosted model (gpt-4o-mini ~0.4 s: "
        "https://apikeyhealth.com/blogs/the-latency-tradeoff)",
    ),
    "llm_output_tokens_per_s": assumed(
        59,
        "tokens/s",
        "gpt-4o-mini output speed, 500 tokens in 8.7 s "
        "(https://community.openai.com/t/inference-speed-of-different-models/1307310)",
    ),
    "propose_output_tokens": assumed(
        40, "tokens", "an answer of <=5 object names as a Python list (the paper's prompt, §C)"
    ),
    "decouple_output_tokens": assumed(
        250,
        "tokens",
        "a CSV answer: a header and <=4 rows (one per attribute category) of ~50 tokens for "
        "~1 verified object per example (paper table 1: 297,567 objects / 287,600 examples)",
    ),
    "llm_batch_tail": assumed(
        1.3,
        "x mean latency",
        "an LLM stage's batch waits for its slowest answer before the next batch starts",
    ),
    "llm_rpm_limit": assumed(
        10_000,
        "requests/min",
        "the API account's request rate limit for the model (limits are per model and usage "
        "tier: https://developers.openai.com/api/docs/guides/rate-limits; set yours)",
    ),
    "llm_tpm_limit": assumed(
        10_000_000,
        "tokens/min",
        "the account's token rate limit for the model, prompts and answers together (same page; "
        "set yours)",
    ),
    "chars_per_token": assumed(4, "chars/token", "the usual rule of thumb for English text"),
    "model_load_s": assumed(
        120,
        "s per GPU pass",
        "actors importing torch/diffusers and loading the weights (SD 2 inpainting ~5 GB) from "
        "/mnt/shared; node boot is not counted (start the GPU workers before the job)",
    ),
}


def node_types(cluster_yaml: Path) -> dict[str, dict]:
    """CPU/GPU counts, instance types and max_workers of cluster.yaml's worker types."""
    try:
        config = yaml.safe_load(cluster_yaml.read_text())
        types = {}
        for name in ("gpu_worker", "cpu_worker"):
            spec = config["available_node_types"][name]
            types[name] = {
                "instance": spec["node_config"]["InstanceType"],
                "cpus": int(spec["resources"]["CPU"]),
                "gpus": int(spec["resources"].get("GPU", 0)),
                "max_workers": int(spec["max_workers"]),
            }
        types["cluster_max_workers"] = int(config["max_workers"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise SystemExit(f"{cluster_yaml}: cannot read the worker types ({exc!r})") from exc
    return types


def smallest(fits: Callable[[int], bool], limit: int = 10_000_000) -> int | None:
    """The smallest n in 1..limit with ``fits(n)``, for a ``fits`` that stays true once true."""
    if not fits(limit):
        return None
    low, high = 1, limit
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


def stage(name: str, where: str, units: float, unit: str, seconds: float, actors: int) -> dict:
    """One row of a build's table: ``units`` of work at ``seconds`` each over ``actors``."""
    work_h = units * seconds / 3600
    return {"stage": name, "runs on": where, "work": round(units), "unit": unit,
            "s per unit": seconds, "actor-hours": round(work_h, 2), "actors": actors}  # fmt: skip


Passes = Callable[[int], tuple[float, float]]
"""Seconds of a build's planning and synthesis passes on n nodes of the type that scales it."""


def size(passes: Passes, budget_s: float) -> tuple[int | None, float]:
    """The fewest nodes that finish both passes in ``budget_s`` (None: no count does), and the
    fastest the build can go with unlimited nodes (its serial parts: the driver, the LLM rate
    limit, model loading)."""
    return smallest(lambda n: sum(passes(n)) <= budget_s), sum(passes(10_000_000))


def synthesis_seconds(x: dict[str, float], rows: float, parallel_s: float) -> float:
    """A synthesis pass: the actors' share of the work, or the driver committing every row in
    one process while they work, whichever takes longer."""
    return max(parallel_s, rows * x["driver_s_per_row"])


def dprime_sd(x: dict[str, float], images: int, budget_s: float, nodes: dict) -> dict:
    """Removal D′ with ``--fill sd``: a CPU planning pass, then SD fills on the GPUs."""
    name = "D′ (removal, --fill sd)"
    gpu_node = nodes["gpu_worker"]
    rows = images * x["dprime_rows_per_image"]
    plan_cpu = images * x["plan_cpu_s_per_image"]
    per_row = x["sd_s_per_image"] + x["fill_overhead_cpu_s_per_row"]  # serial in the actor

    def passes(gpus: int) -> tuple[float, float]:
        # The planning pass runs on every CPU of the GPU nodes before any fill actor starts.
        plan = plan_cpu / (gpus * gpu_node["cpus"])
        return plan, synthesis_seconds(x, rows, x["model_load_s"] + rows * per_row / gpus)

    gpus, fastest_s = size(passes, budget_s)
    if gpus is None:
        return infeasible(name, x, rows, fastest_s, llm_s=0.0)
    plan_s, synth_s = passes(gpus)
    caption_actors = max(1, math.ceil(rows * x["caption_cpu_s_per_row"] / synth_s))
    stages = [
        stage("plan (tagger, rewrites)", "CPU", images, "images", x["plan_cpu_s_per_image"],
              gpus * gpu_node["cpus"]),
        stage("fill: SD 2 inpainting", "GPU", rows, "rows", per_row, gpus),
        stage("caption: np-removal", "CPU", rows, "rows", x["caption_cpu_s_per_row"],
              caption_actors),
        stage("driver: commit shards", "head (1 process)", rows, "rows", x["driver_s_per_row"], 1),
    ]  # fmt: skip
    return summary(
        name, x, rows, gpus, 0, plan_s, synth_s, stages, nodes,
        f"xmr synth --dataset coco --fill sd --fill-actors {gpus} --gpus-per-actor 1 "
        f"--caption-actors {caption_actors} --batch-size 32",
        gpu_work_s=rows * per_row, cpu_busy_s=plan_cpu + rows * x["caption_cpu_s_per_row"],
        shipped_s=sum(passes(gpu_node["max_workers"])),
    )  # fmt: skip


def dprime_telea(x: dict[str, float], images: int, budget_s: float, nodes: dict) -> dict:
    """Removal D′ with ``--fill telea``: CPU only, for comparison."""
    name = "D′ (removal, --fill telea, CPU only)"
    cpu_node = nodes["cpu_worker"]
    rows = images * x["dprime_rows_per_image"]
    plan_cpu = images * x["plan_cpu_s_per_image"]
    per_row = x["telea_cpu_s_per_row"] + x["caption_cpu_s_per_row"]  # fused into one task

    def passes(cpu_nodes: int) -> tuple[float, float]:
        cpus = cpu_nodes * cpu_node["cpus"]
        return plan_cpu / cpus, synthesis_seconds(x, rows, rows * per_row / cpus)

    cpu_nodes, fastest_s = size(passes, budget_s)
    if cpu_nodes is None:
        return infeasible(name, x, rows, fastest_s, llm_s=0.0)
    plan_s, synth_s = passes(cpu_nodes)
    cpus = cpu_nodes * cpu_node["cpus"]
    stages = [
        stage("plan (tagger, rewrites)", "CPU", images, "images", x["plan_cpu_s_per_image"], cpus),
        stage("fill telea + caption", "CPU", rows, "rows", per_row, cpus),
        stage("driver: commit shards", "head (1 process)", rows, "rows", x["driver_s_per_row"], 1),
    ]
    return summary(
        name, x, rows, 0, cpu_nodes, plan_s, synth_s, stages, nodes,
        f"xmr synth --dataset coco --fill telea --fill-actors {cpus} --caption-actors {cpus} "
        "--batch-size 32",
        gpu_work_s=0.0, cpu_busy_s=plan_cpu + rows * per_row,
        shipped_s=sum(passes(cpu_node["max_workers"])),
    )  # fmt: skip


def llm_latency(x: dict[str, float], output_tokens: float) -> float:
    """Seconds of one LLM request: the first token, then the answer at the output speed."""
    return x["llm_ttft_s"] + output_tokens / x["llm_output_tokens_per_s"]


def biaug_sd(x: dict[str, float], images: int, budget_s: float, nodes: dict) -> dict:
    """BiAug-D′: a planning pass (LLM proposals -> GroundingDINO -> LLM attributes, streamed),
    then SD inpainting of both images of every hard-negative group."""
    name = "BiAug-D′ (--mode biaug --llm openai --fill sd)"
    examples = images * x["captions_per_image"]
    rows = examples * x["biaug_rows_per_example"]
    requests = 2 * examples  # one proposal and one attribute request per example (upper bound)
    tokens = examples * (
        x["propose_prompt_tokens"] + x["propose_output_tokens"]
        + x["decouple_prompt_tokens"] + x["decouple_output_tokens"]
    )  # fmt: skip
    # Both LLM stages share the account's limits: the planning pass lasts at least this long.
    llm_s = max(requests / x["llm_rpm_limit"], tokens / x["llm_tpm_limit"]) * 60
    detect_work = examples * x["detector_s_per_image"]
    per_row = x["sd_s_per_image"] + x["fill_overhead_cpu_s_per_row"]
    load = x["model_load_s"]

    def passes(gpus: int) -> tuple[float, float]:
        # The planning pass lasts as long as its slower side: the LLM's limits or the detectors.
        plan = load + max(llm_s, detect_work / gpus)
        return plan, synthesis_seconds(x, rows, load + rows * per_row / gpus)

    gpus, fastest_s = size(passes, budget_s)
    if gpus is None:
        return infeasible(name, x, rows, fastest_s, llm_s)
    plan_s, synth_s = passes(gpus)
    # Each LLM stage answers every example within the planning pass; both get --llm-actors.
    rate = examples / (plan_s - load)
    in_flight = int(x["llm_in_flight"])
    per_actor = in_flight * x["llm_client_efficiency"]
    latency = {stage: llm_latency(x, x[f"{stage}_output_tokens"]) * x["llm_batch_tail"]
               for stage in ("propose", "decouple")}  # fmt: skip
    llm_actors = max(math.ceil(rate * t / per_actor) for t in latency.values())
    stages = [
        stage("propose: LLM request", "CPU (0.25/actor)", examples, "requests",
              latency["propose"] / per_actor, llm_actors),
        stage("verify: GroundingDINO", "GPU", examples, "images", x["detector_s_per_image"], gpus),
        stage("decouple: LLM request", "CPU (0.25/actor)", examples, "requests",
              latency["decouple"] / per_actor, llm_actors),
        stage("inpaint: SD 2, 2 images/group", "GPU", rows, "rows", per_row, gpus),
        stage("driver: commit shards", "head (1 process)", rows, "rows", x["driver_s_per_row"], 1),
    ]  # fmt: skip
    result = summary(
        name, x, rows, gpus, 0, plan_s, synth_s, stages, nodes,
        f"xmr synth --mode biaug --dataset coco --llm openai --fill sd --detect-actors {gpus} "
        f"--fill-actors {gpus} --gpus-per-actor 1 --llm-actors {llm_actors} "
        f"--llm-in-flight {in_flight} --batch-size 32",
        gpu_work_s=detect_work + rows * per_row,
        cpu_busy_s=requests * x["llm_client_cpu_s_per_request"],
        shipped_s=sum(passes(nodes["gpu_worker"]["max_workers"])),
    )  # fmt: skip
    result["llm"] = {
        "requests": round(requests),
        "requests_per_min": round(2 * rate * 60),
        "tokens_per_min": round(tokens / ((plan_s - load) / 60)),
        "minutes_at_the_rate_limits": round(llm_s / 60, 1),
        "latency_s": {k: round(v / x["llm_batch_tail"], 2) for k, v in latency.items()},
        "open_requests": round(rate * sum(latency.values())),  # both stages at once
    }
    return result


def infeasible(name: str, x: dict[str, float], rows: float, fastest_s: float, llm_s: float) -> dict:
    """A build that no node count finishes in the budget, and what bounds it."""
    return {
        "build": name,
        "feasible": False,
        "fastest_hours": round(fastest_s / 3600, 2),
        "driver_minutes": round(rows * x["driver_s_per_row"] / 60, 1),
        "llm_minutes": round(llm_s / 60, 1),
    }


def summary(
    name: str,
    x: dict[str, float],
    rows: float,
    gpus: int,
    cpu_nodes: int,
    plan_s: float,
    synth_s: float,
    stages: list[dict],
    nodes: dict,
    command: str,
    gpu_work_s: float,
    cpu_busy_s: float,
    shipped_s: float,
) -> dict:
    """What a build needs; ``shipped_s``: how long it takes with cluster.yaml's max_workers."""
    gpu_node = nodes["gpu_worker"]
    return {
        "build": name,
        "feasible": True,
        "rows": round(rows),
        "gpu_nodes": gpus,
        "cpu_nodes": cpu_nodes,
        "gpu_hours": round(gpu_work_s / 3600, 1),
        "cpu_hours": round(cpu_busy_s / 3600, 2),
        "spare_cpus_on_gpu_nodes": gpus * (gpu_node["cpus"] - 1),  # a GPU actor holds one CPU
        "plan_pass_min": round(plan_s / 60, 1),
        "synth_pass_min": round(synth_s / 60, 1),
        "driver_busy_share": round(rows * x["driver_s_per_row"] / synth_s, 2),
        "write_MB_per_s": round(rows * x["png_bytes_per_row"] / synth_s / 1e6, 1),
        "hours_on_shipped_cluster": round(shipped_s / 3600, 2),
        "cluster_yaml": (
            {
                "gpu_worker": {"min_workers": gpus, "max_workers": gpus},
                "max_workers": gpus + cpu_nodes,
                "gpu_vcpu_quota": gpus * gpu_node["cpus"],
            }
            if gpus
            else {"cpu_worker": {"max_workers": cpu_nodes}, "max_workers": cpu_nodes}
        ),
        "command": command,
        "stages": stages,
    }


def measure(data: Path, limit: int | None, repeats: int = 3, batch_size: int = 32) -> dict:
    """Measure the CPU inputs on a COCO-layout folder, in this process (no Ray).

    Each stage runs over every row ``repeats`` times. Stage figures are CPU seconds of this
    process, the fastest pass (the machine is shared: slower passes measure the other jobs); the
    driver's is the median pass in wall-clock seconds, as writing the shards waits on the disk.
    """
    config = SynthConfig(dataset="coco", data=data, limit=limit, fill="telea")
    try:
        records, _ = read_inputs(config, data)
    except DataError as exc:
        raise SystemExit(f"--measure {data}: {exc}") from exc
    records = [r for r in records if r.captions]  # (COCO train images all have captions)
    if not records:
        raise SystemExit(f"--measure {data}: no readable COCO train images with captions there")
    items = plan_inputs(records)
    inputs = [rows_to_batch(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
    planner = PlanRows(config, RemovalConfig(), Resources(1.0), batch_size)

    def timed(
        run: Callable[[], object],
        clock: Callable[[], float] = time.process_time,
        pick: Callable[[list[float]], float] = min,
    ) -> tuple[float, object]:
        """``pick`` of the seconds of ``repeats`` runs of ``run``, and the last run's result."""
        seconds, result = [], None
        for _ in range(repeats):
            start = clock()
            result = run()
            seconds.append(clock() - start)
        return pick(seconds), result

    def plan() -> list[Batch]:
        _cached_spans.cache_clear()  # each pass tags every caption again, as a fresh worker does
        return [planner.run_local(batch) for batch in inputs]

    planner.run_local(inputs[0])  # loads the tagger, as a warm worker has it
    plan_cpu, planned_batches = timed(plan)
    planned = [
        {k: b[k][j] for k in b if not k.startswith("seconds_")}
        for b in planned_batches
        for j in range(len(b["key"]))
        if not b["error"][j]
    ]
    if not planned:
        raise SystemExit(f"--measure {data}: planning made no D′ rows from these images")
    batches = [rows_to_batch(planned[i : i + batch_size])
               for i in range(0, len(planned), batch_size)]  # fmt: skip

    def each(stage: FillImages | WriteCaptions, todo: list[Batch]) -> Callable[[], list[Batch]]:
        stage.run_local(todo[0])  # set up outside the timing
        return lambda: [stage.run_local(batch) for batch in todo]

    telea_cpu, filled = timed(each(FillImages(config, Resources(1.0), batch_size), batches))
    zero = FillImages(replace(config, fill="zero"), Resources(1.0), batch_size)
    zero_cpu, _ = timed(each(zero, batches))
    caption_cpu, captioned = timed(
        each(WriteCaptions(config, RemovalConfig(), Resources(1.0), batch_size), filled)
    )

    def commit() -> list[dict]:
        """What the driver does per row: build the row, commit 256-row shards."""
        with tempfile.TemporaryDirectory() as tmp:
            rows = [pair_record(b, j, "telea", "np-removal")
                    for b in captioned for j in range(len(b["key"]))]  # fmt: skip
            for index in range(0, len(rows), 256):
                commit_shard(Path(tmp), index // 256, rows[index : index + 256], [])
        return rows

    driver_s, rows = timed(commit, time.perf_counter, statistics.median)
    n = len(rows)

    shared = SynthConfig(mode="biaug", dataset="coco", data=data, limit=limit, fill="sd")
    biaug = BiAugConfig()
    chars_per_token = INPUTS["chars_per_token"].value
    propose, decouple = [], []
    for record in records:
        caption = record.captions[0].text
        largest = max(record.objects, key=lambda o: o.bbox[2] * o.bbox[3], default=None)
        verified = json.dumps([{"name": largest.category}] if largest else [])
        asked = propose_request(shared, biaug, caption)
        answered = decouple_request(shared, biaug, caption, verified)
        for out, request in ((propose, asked), (decouple, answered)):
            out.append(sum(len(content) for _, content in request.messages) / chars_per_token)

    run = (
        f"`python bench/capacity_coco.py --measure {data}` ({len(records)} images, {n} rows, "
        f"best of {repeats} passes; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f})"
    )
    prompt = "mean prompt characters (xmr's own prompt builder, the image's first caption"
    return {
        "dprime_rows_per_image": measured(n / len(records), "rows/image", run),
        "plan_cpu_s_per_image": measured(plan_cpu / len(records), "CPU s/image", run),
        "telea_cpu_s_per_row": measured(telea_cpu / n, "CPU s/row", run),
        "fill_overhead_cpu_s_per_row": measured(zero_cpu / n, "CPU s/row", f"{run}, --fill zero"),
        "caption_cpu_s_per_row": measured(caption_cpu / n, "CPU s/row", run),
        "driver_s_per_row": measured(
            driver_s / n, "s/row", f"{run}, median pass, wall clock, local disk"
        ),
        "png_bytes_per_row": measured(sum(len(r["image"]) for r in rows) / n, "bytes/row", run),
        "propose_prompt_tokens": measured(
            sum(propose) / len(propose), "tokens", f"{run}: {prompt}) / chars_per_token"
        ),
        "decouple_prompt_tokens": measured(
            sum(decouple) / len(decouple),
            "tokens",
            f"{run}: {prompt}, its largest object as the one verified) / chars_per_token",
        ),
    }


def show(console: Console, result: dict) -> None:
    """A build's stage table and its figures."""
    if not result["feasible"]:
        console.print(
            f"[bold]{result['build']}[/]: no node count finishes it in the budget; the fastest "
            f"is {result['fastest_hours']} h (driver {result['driver_minutes']} min, LLM rate "
            f"limits {result['llm_minutes']} min, model loading)\n"
        )
        return
    table = Table(title=result["build"], title_justify="left")
    for column in result["stages"][0]:
        justify = "left" if column in ("stage", "runs on", "unit") else "right"
        table.add_column(column, justify=justify)
    for row in result["stages"]:
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()))
    console.print(table)
    for key, value in result.items():
        if key not in ("stages", "build", "feasible"):
            console.print(f"  {key}: {json.dumps(value) if isinstance(value, dict) else value}")
    console.print()


SWEEP_HOURS = (0.5, 1, 2, 4, 8, 24, 72)
BUILDS = (dprime_sd, biaug_sd, dprime_telea)


def nodes_by_hours(
    build: Callable[..., dict], x: dict[str, float], images: int, nodes: dict
) -> dict[float, int | None]:
    """The nodes that scale ``build`` (GPU nodes; CPU nodes for a CPU-only build) that finish
    it in each of SWEEP_HOURS; None where no count does."""
    counts = {}
    for hours in SWEEP_HOURS:
        result = build(x, images, hours * 3600, nodes)
        counts[hours] = (result["gpu_nodes"] or result["cpu_nodes"]) if result["feasible"] else None
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0, help="wall-clock budget per build")
    parser.add_argument("--images", type=int, default=COCO_TRAIN_IMAGES, help="source images")
    parser.add_argument("--sd-seconds-per-image", type=float, help="GPU s per inpainted image")
    parser.add_argument("--detector-seconds-per-image", type=float, help="GPU s per detection")
    parser.add_argument("--dprime-rows-per-image", type=float)
    parser.add_argument("--biaug-rows-per-example", type=float)
    parser.add_argument("--llm-rpm-limit", type=float, help="the API's requests per minute")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help=f"override any input: {', '.join(INPUTS)}")  # fmt: skip
    parser.add_argument("--measure", type=Path, help="re-measure the CPU inputs on this COCO dir")
    parser.add_argument("--limit", type=int, help="with --measure: only the first N images")
    parser.add_argument("--repeats", type=int, default=3, help="with --measure: passes per stage")
    parser.add_argument("--cluster", type=Path, default=Path("cluster.yaml"))
    parser.add_argument("--out", type=Path, help="write the inputs and results as JSON")
    args = parser.parse_args()
    if args.hours <= 0 or args.images <= 0 or args.repeats < 1:
        parser.error("--hours and --images must be positive, --repeats at least 1")

    inputs = dict(INPUTS)
    if args.measure:
        inputs |= measure(args.measure, args.limit, args.repeats)
    overrides = [item.split("=", 1) for item in args.set]
    for flag in ("sd_seconds_per_image", "detector_seconds_per_image", "dprime_rows_per_image",
                 "biaug_rows_per_example", "llm_rpm_limit"):  # fmt: skip
        if getattr(args, flag) is not None:
            overrides.append([flag.replace("seconds", "s"), str(getattr(args, flag))])
    for item in overrides:
        if len(item) != 2 or item[0] not in inputs:
            parser.error(f"--set {'='.join(item)}: expected NAME=VALUE, NAME one of {list(inputs)}")
        try:
            value = float(item[1])
        except ValueError:
            value = math.nan
        if not value > 0:
            parser.error(f"--set {item[0]}={item[1]}: expected a positive number")
        inputs[item[0]] = replace(inputs[item[0]], value=value, kind="OVERRIDDEN",
                                  source="command line")  # fmt: skip
    x = {name: figure.value for name, figure in inputs.items()}
    nodes = node_types(args.cluster)
    results = [build(x, args.images, args.hours * 3600, nodes) for build in BUILDS]
    sweep = {build.__name__: nodes_by_hours(build, x, args.images, nodes) for build in BUILDS}

    console = Console()
    table = Table(title="Inputs (sources below)", title_justify="left")
    for column in ("name", "value", "unit", "kind"):
        table.add_column(column)
    for name, f in inputs.items():
        value = f"{f.value:,.0f}" if f.value >= 100 else f"{f.value:.4g}"
        table.add_row(name, value, f.unit, f.kind)
    console.print(table)
    for name, f in inputs.items():
        console.print(f"  {name}: {f.source}", highlight=False)
    gpu_node, cpu_node = nodes["gpu_worker"], nodes["cpu_worker"]
    console.print(
        f"\nCOCO train2017: {args.images:,} images; budget {args.hours:g} h per build. gpu_worker "
        f"= {gpu_node['instance']} ({gpu_node['gpus']} GPU, {gpu_node['cpus']} vCPUs, max_workers "
        f"{gpu_node['max_workers']} in {args.cluster}), cpu_worker = {cpu_node['instance']} "
        f"({cpu_node['cpus']} vCPUs). No GPU was lent to this issue: the GPU seconds are ASSUMED "
        "placeholders until measured on an A10G (bench/bench_synth_throughput.py --fill sd, "
        "bench/bench_biaug_stages.py --device cuda).\n"
    )
    for result in results:
        show(console, result)
    table = Table(title="Nodes that finish each build in N hours (GPU nodes; telea: CPU nodes)",
                  title_justify="left")  # fmt: skip
    table.add_column("build")
    for hours in SWEEP_HOURS:
        table.add_column(f"{hours:g} h", justify="right")
    for name, row in sweep.items():
        table.add_row(name, *("-" if n is None else str(n) for n in row.values()))
    console.print(table)
    if args.out:
        data = {"hours": args.hours, "images": args.images, "nodes": nodes,
                "inputs": {k: asdict(v) for k, v in inputs.items()}, "builds": results,
                "nodes_by_hours": sweep}  # fmt: skip
        args.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
