"""Experiments (``jaxfl reproduce NAME``) and benchmarks (``jaxfl bench NAME``) registered by name."""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A reproduction: ``run(quick, out_dir, variant, panels, share) -> path of results.json``; ``study`` is its
    :class:`~jaxfl.experiments.study.Study`."""

    name: str
    description: str
    run: Callable[..., Path]
    study: object = None


EXPERIMENTS: dict[str, Experiment] = {}

# Modules whose import registers experiments; later issues append theirs.
_EXPERIMENT_MODULES = ["jaxfl.experiments.demo", "jaxfl.experiments.lowy_convex", "jaxfl.experiments.lowy_nonconvex",
                       "jaxfl.experiments.dprec_epsilon",
                       "jaxfl.experiments.dprec", "jaxfl.experiments.huang_jdp", "jaxfl.experiments.vandijk_async"]

BENCHMARKS: dict[str, str] = {
    "engine_vs_loop": "jaxfl engine vs NumPy vectorized over silos and minibatch "
                      "(and the silo loop), Lowy & Razaviyayn MNIST shape",
    "lowy_convex_grid": "Lowy & Razaviyayn's whole MNIST grid (8,400 runs) as vmapped programs vs NumPy "
                        "silo-vectorised and looped (and the authors' loop)",
    "lowy_nonconvex_grid": "Lowy et al.'s MNIST grid (SPIDER, MB-SGD, Local SGD; MLP) as vmapped programs vs "
                           "one run at a time",
    "rec_kernel": "DP-REC's fused REC encoder vs bare jax.random.normal and a materializing encoder (time, memory)",
    "scaling": "round time against silos (8..4096), model size and forced host devices (equal results); PNG plot",
    "noise_rate": "Gaussian noise draws: normals/s of JAX's key implementations vs NumPy, beside the write bandwidth",
    "local_training": "conv-model local training on CPU: lax vs loop-friendly convolution, "
                      "clients vmapped vs one at a time; PyTorch baseline",
    "conv_layers": "each conv layer's training pass (forward, kernel and input gradients) vs PyTorch, "
                   "per example and batched, with candidate forms",
    "clipping_vs_opacus": "DP-SGD step samples/s: jaxfl per-example clipping (vmap, ghost) vs Opacus hooks and "
                          "ghost clipping",
    "pinned_runs": "a study's independent runs one per core (pinned) vs one after the other on all cores: "
                   "rounds/s of dprec/mnist",
    "async_clients": "van Dijk et al.'s asynchronous protocol with 16..4096 simulated clients: compiled slices vs "
                     "NumPy on the same timeline",
    "joint_dp_step": "Huang et al.'s joint-DP round (TwoHeadCNN, fc1 private) vs the same round in PyTorch (Opacus "
                     "hooks, torch.func), and in one forward pass vs two",
    "dp_sgd_mnist": "the DP-SGD MNIST tutorial (plain flax CNN) through jaxfl.dp_sgd + train vs Opacus ghost and "
                    "hooks, samples/s",
    "dp_fedavg_cohort": "DP-FedAvg sampling 10 of 100 clients (the default call) vs the same round on the cohort alone "
                        "and with every client masked",
    "summary": "the table of bench/README.md: every committed benchmark's headline ratio, baseline and machine "
               "(no timing)",
}


def register(study):
    """Registers ``study`` as experiment ``study.name`` (run by :func:`reproduce`); returns it."""
    EXPERIMENTS[study.name] = Experiment(
        study.name, study.description,
        lambda quick, out_dir, variant=None, panels=None, share=None, workers=None, **options: reproduce(
            study, quick, out_dir, variant, panels=panels, share=share, workers=workers, **options),
        study)
    return study


def reproduce(study, quick: bool, out_dir, variant: str | None = None, log=print, panels=None,
              share=None, workers: dict | None = None, segment_rounds: int | None = None,
              configs_per_batch: int | None = None) -> Path | None:
    """Runs ``study`` (its quick form and/or named variant; only the panels labelled ``panels`` if given, a
    partial run whose results say so), writes its results under ``out_dir`` and prints its summary. With
    ``share`` (:class:`jaxfl.experiments.study.Share`, a worker of ``jaxfl reproduce --workers``): only the
    share's grid programs and runs, stored under ``out_dir``; nothing else is written and None returned.
    ``workers``: ``{"count", "wall_seconds"}`` of the workers' pass that ran before this one (recorded in the
    results' ``config.workers``). ``segment_rounds``: grid programs in checkpointed segments of about that many
    rounds (:func:`jaxfl.experiments.study.run`). ``configs_per_batch``: grid points per compiled call of every
    grid program, replacing :attr:`jaxfl.experiments.study.Study.configs_per_batch` (a part is keyed by it)."""
    import dataclasses

    from jaxfl.experiments import report, study as study_lib

    form = study.form_of(quick, variant, panels)
    if configs_per_batch is not None:
        form = dataclasses.replace(form, configs_per_batch=configs_per_batch)
    check_keeps_results(form, out_dir)
    if share is not None:
        prefix = f"[worker {share.index + 1}/{share.count}] "
        study_lib.run(form, Path(out_dir), lambda line: log(prefix + line), share, segment_rounds)
        return None
    log(f"{form.name}: {form.form} form{' (tiny settings for CI, not the paper' + chr(39) + 's)' if quick else ''}")
    outcome = study_lib.run(form, Path(out_dir), log, segment_rounds=segment_rounds)
    outcome.workers = workers
    path = report.write(outcome, out_dir)
    log((Path(out_dir) / "summary.md").read_text())
    resumed = (f"; {outcome.parts_seconds:.1f} s over its grid programs, {outcome.parts_reused} of them from stored "
               "parts" if outcome.parts_reused else "")
    log(f"wall time {outcome.seconds:.1f} s ({form.form} form{resumed})")
    return path


def check_keeps_results(form, out_dir) -> None:
    """Raises ``ValueError`` when running ``form`` (a study's form, :meth:`Study.form_of`) into ``out_dir``
    would replace a ``results.json`` there that holds another study or form, or panels this run leaves out (a partial
    ``--panel`` run writes its panels only). Re-running the same form over the same or more panels is allowed:
    their stored parts are reused."""
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        return
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # not a results file jaxfl can read: nothing of ours to keep
    config = doc.get("config", {})
    if doc.get("experiment") not in (None, form.name):
        raise ValueError(f"{path} holds {doc['experiment']!r}, which this run of {form.name!r} would replace: "
                         "pass another --out")
    if config.get("form") not in (None, form.form):
        raise ValueError(f"{path} holds the {config['form']!r} form, which this run ({form.form!r} form) would "
                         "replace: pass another --out")
    running = {panel.label for _, panel in form.panels_run}
    dropped = [label for label in config.get("panels", []) if label not in running]
    if dropped:
        raise ValueError(f"{path} holds panel(s) {', '.join(dropped)}, which this run would drop: add --panel for "
                         "each (their stored parts are reused) or pass another --out")


def experiments() -> dict[str, Experiment]:
    for module in _EXPERIMENT_MODULES:
        importlib.import_module(module)
    return EXPERIMENTS


def get_experiment(name: str) -> Experiment:
    known = experiments()
    if name not in known:
        raise ValueError(f"unknown experiment {name!r} (known: {', '.join(sorted(known))})")
    return known[name]


def benchmark_script(name: str) -> Path:
    """The path of ``bench/<name>.py`` in the source tree."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r} (known: {', '.join(sorted(BENCHMARKS))})")
    root = Path(__file__).resolve().parents[2]
    script = root / "bench" / f"{name}.py"
    if not script.exists():
        raise ValueError(f"benchmark {name!r} needs the source tree (no {script}); install jaxfl with pip -e")
    return script
