"""Studies registered by name (``jaxfl reproduce NAME``), the paper homes that register them, and the benchmarks
(``jaxfl bench NAME``).

A study registers itself when its module is imported (:func:`register`). The library registers only its own
(``demo``); the papers' studies live beside the library, one folder per paper under ``papers/`` in a clone of the
repository (a Python package each: ``papers/<paper>/__init__.py`` imports its study modules), and are found by
:func:`experiments`: the folder ``papers`` given, or ``$JAXFL_PAPERS``, or the nearest ``papers/`` package at or
above the working directory. A study from a paper home writes its full runs under ``<home>/results/`` unless told
otherwise (``--out``); the runner itself only ever writes where it is told.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Callable

PAPERS_ENV = "JAXFL_PAPERS"
"""Names the ``papers/`` folder of paper homes when it is not at or above the working directory."""


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A registered study: ``run(quick, out_dir, variant, panels, share) -> path of results.json``; ``study`` is its
    :class:`~jaxfl.studies.spec.Study`, ``home`` the paper home that registered it (None for the library's own).

    Example:
      >>> demo = get_experiment("demo")
      >>> demo.home is None, demo.default_out(quick=True).as_posix()          # the library's own study
      (True, 'runs/quick/demo')
    """

    name: str
    description: str
    run: Callable[..., Path]
    study: object = None
    home: Path | None = None

    def default_out(self, quick: bool, variant: str | None = None) -> Path:
        """Where ``jaxfl reproduce`` writes without ``--out``: quick forms under ``runs/quick/NAME`` (the working
        directory), full runs under the paper home's ``results/`` (``results/NAME`` for the library's own)."""
        if quick:
            base = Path("runs/quick") / self.name
        elif self.home is not None:
            base = self.home / "results" / self.name.split("/", 1)[-1]
        else:
            base = Path("results") / self.name
        return base / (variant or "")


EXPERIMENTS: dict[str, Experiment] = {}
_LIBRARY_STUDIES = ("jaxfl.studies.demo",)


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


def register(study, home: str | os.PathLike | None = None):
    """Registers ``study`` as experiment ``study.name`` (run by :func:`reproduce`); returns it. ``home``: the folder
    whose ``results/`` its full runs default to (:meth:`Experiment.default_out`); by default the folder of the
    module calling ``register`` when that module is not the library's own (a paper home), else None.

    Example (a study of your own, here the demo under another name, then ``jaxfl reproduce my-demo --papers DIR``
    from the folder holding your module, or :func:`reproduce`):

      >>> import dataclasses
      >>> from jaxfl.studies.demo import STUDY
      >>> mine = register(dataclasses.replace(STUDY, name="my-demo", description="the demo, once more"))
      >>> get_experiment("my-demo").study is mine
      True
    """
    if home is None:
        caller = inspect.currentframe().f_back.f_globals
        if not str(caller.get("__name__", "")).startswith("jaxfl.") and caller.get("__file__"):
            home = Path(caller["__file__"]).resolve().parent
    EXPERIMENTS[study.name] = Experiment(
        study.name, study.description,
        lambda quick, out_dir, variant=None, panels=None, share=None, workers=None, **options: reproduce(
            study, quick, out_dir, variant, panels=panels, share=share, workers=workers, **options),
        study, None if home is None else Path(home))
    return study


def reproduce(study, quick: bool, out_dir, variant: str | None = None, log=print, panels=None,
              share=None, workers: dict | None = None, segment_rounds: int | None = None,
              configs_per_batch: int | None = None, trials: int | None = None) -> Path | None:
    """Runs ``study`` (its quick form and/or named variant; only the panels labelled ``panels`` and the first
    ``trials`` trials if given, a partial run whose results say so), writes its results under ``out_dir`` and prints
    its summary. With ``share`` (:class:`jaxfl.studies.runner.Share`, a worker of ``jaxfl reproduce --workers``):
    only the share's grid programs and runs, stored under ``out_dir``; nothing else is written and None returned.
    ``workers``: ``{"count", "wall_seconds"}`` of the workers' pass that ran before this one (recorded in the
    results' ``config.workers``). ``segment_rounds``: grid programs in checkpointed segments of about that many
    rounds (:func:`jaxfl.studies.runner.run`). ``configs_per_batch``: grid points per compiled call of every
    grid program, replacing :attr:`jaxfl.studies.spec.Study.configs_per_batch` (a part is keyed by it).

    Example (the demo's quick form cut to one seed and one epsilon, written to a fresh folder):
      >>> import dataclasses, json, tempfile
      >>> from jaxfl.studies.demo import STUDY
      >>> small = dataclasses.replace(STUDY, quick={"reps": 1, "settings": {"epsilons": (1.0,)}})
      >>> path = reproduce(small, quick=True, out_dir=tempfile.mkdtemp(), log=lambda *line: None)
      >>> path.name, sorted(p.name for p in path.parent.iterdir() if p.suffix == ".md")
      ('results.json', ['summary.md'])
      >>> [(run["family"], run["epsilon"]) for run in json.loads(path.read_text())["runs"]]
      [('mbsgd', None), ('fedavg', None), ('dp', 1.0)]
    """
    import dataclasses

    from jaxfl.studies import report, runner

    form = study.form_of(quick, variant, panels, trials)
    if configs_per_batch is not None:
        form = dataclasses.replace(form, configs_per_batch=configs_per_batch)
    check_keeps_results(form, out_dir)
    if share is not None:
        prefix = f"[worker {share.index + 1}/{share.count}] "
        runner.run(form, Path(out_dir), lambda line: log(prefix + line), share, segment_rounds)
        return None
    log(f"{form.name}: {form.form} form{' (tiny settings for CI, not the paper' + chr(39) + 's)' if quick else ''}")
    outcome = runner.run(form, Path(out_dir), log, segment_rounds=segment_rounds)
    outcome.workers = workers
    path = report.write(outcome, out_dir)
    log((Path(out_dir) / "summary.md").read_text())
    resumed = (f"; {outcome.parts_seconds:.1f} s over its grid programs, {outcome.parts_reused} of them from stored "
               "parts" if outcome.parts_reused else "")
    log(f"wall time {outcome.seconds:.1f} s ({form.form} form{resumed})")
    return path


def check_keeps_results(form, out_dir) -> None:
    """Raises ``ValueError`` when running ``form`` (a study's form, :meth:`Study.form_of`) into ``out_dir``
    would replace a ``results.json`` there that holds another study or form, or panels or trials this run leaves out
    (a partial ``--panel`` or ``--trials`` run writes its own only). Re-running the same form over the same or more
    panels is allowed: their stored parts are reused.

    Example (a fresh folder keeps nothing, so any form may write there):
      >>> import tempfile
      >>> from jaxfl.studies.demo import STUDY
      >>> check_keeps_results(STUDY.form_of(quick=True), tempfile.mkdtemp()) is None
      True
    """
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
    if int(config.get("trials", 0)) > form.trials_run:
        raise ValueError(f"{path} holds {config['trials']} trials, which this run of {form.trials_run} would drop: "
                         "pass --trials with at least as many (their stored parts are reused) or another --out")


def find_papers(papers: str | os.PathLike | None = None) -> Path | None:
    """The ``papers/`` folder of paper homes: ``papers`` if given, else ``$JAXFL_PAPERS``, else the nearest folder
    ``papers`` holding an ``__init__.py`` at or above the working directory; None if there is none.

    Example:
      >>> import tempfile
      >>> find_papers(tempfile.mkdtemp())                         # a folder given must hold paper homes
      Traceback (most recent call last):
      ...
      ValueError: ...: not a folder of paper homes (no __init__.py); pass the repository's papers/
    """
    given = papers if papers is not None else os.environ.get(PAPERS_ENV) or None
    if given is not None:
        path = Path(given).resolve()
        if not (path / "__init__.py").is_file():
            raise ValueError(f"{given}: not a folder of paper homes (no __init__.py); pass the repository's papers/")
        return path
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "papers" / "__init__.py").is_file():
            return folder / "papers"
    return None


def load_papers(papers: str | os.PathLike | None = None) -> list[str]:
    """Imports every home under :func:`find_papers` (``<folder>.<home>``, e.g. ``papers.lowy_convex``, which registers
    its studies); returns the homes' names. The folder's parent goes on ``sys.path`` so that the homes import one
    another as ``<folder>.<home>``; a package of that name already imported from elsewhere is refused.

    Example:
      >>> import pathlib, tempfile
      >>> folder = pathlib.Path(tempfile.mkdtemp()) / "my_papers"
      >>> folder.mkdir(); _ = (folder / "__init__.py").write_text("")
      >>> load_papers(folder)                                     # a folder of no homes yet imports nothing
      []
    """
    root = find_papers(papers)
    if root is None:
        return []
    loaded = sys.modules.get(root.name)
    if loaded is not None and Path(loaded.__file__).resolve().parent != root:
        raise ValueError(f"a package {root.name!r} is already loaded from {Path(loaded.__file__).parent}, not {root}")
    if str(root.parent) not in sys.path:
        sys.path.insert(0, str(root.parent))
    homes = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    for name in homes:
        importlib.import_module(f"{root.name}.{name}")
    return homes


def experiments(papers: str | os.PathLike | None = None) -> dict[str, Experiment]:
    """Every registered study by name: the library's own and those of the paper homes (:func:`load_papers`).

    Example:
      >>> "demo" in experiments()                             # the library's own study, beside the paper homes'
      True
    """
    for module in _LIBRARY_STUDIES:
        importlib.import_module(module)
    load_papers(papers)
    return EXPERIMENTS


def get_experiment(name: str, papers: str | os.PathLike | None = None) -> Experiment:
    """The registered study ``name`` (e.g. ``"lowy-convex/mnist"``); ``ValueError`` naming the known ones.

    Example:
      >>> get_experiment("demo").name
      'demo'
      >>> get_experiment("no-such-study")
      Traceback (most recent call last):
      ...
      ValueError: unknown experiment 'no-such-study' ...
    """
    known = experiments(papers)
    if name not in known:
        where = find_papers(papers)
        hint = (f"; paper homes from {where}" if where else
                "; no papers/ folder found: run from a clone of the repository, or pass --papers / set $JAXFL_PAPERS")
        raise ValueError(f"unknown experiment {name!r} (known: {', '.join(sorted(known))}{hint})")
    return known[name]


def benchmark_script(name: str) -> Path:
    """The path of ``bench/<name>.py`` in the source tree.

    Example:
      >>> benchmark_script("dp_sgd_mnist").name
      'dp_sgd_mnist.py'
    """
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r} (known: {', '.join(sorted(BENCHMARKS))})")
    root = Path(__file__).resolve().parents[2]
    script = root / "bench" / f"{name}.py"
    if not script.exists():
        raise ValueError(f"benchmark {name!r} needs the source tree (no {script}); install jaxfl with pip -e")
    return script
