"""Huang et al.'s joint-DP round: the shared part's noisy gradient and the private head's plain one in one forward pass.

A joint-DP local step (``personalized(noise_on="shared")``, ``fc1`` private) needs, at the silo's current
parameters, the clipped and noised gradient of the shared part (convolutions and ``fc2``) and the plain gradient
of the private ``fc1``. Since df85f53 jaxfl takes both from one forward pass
(:func:`jaxfl.engine.local.noisy_and_plain_gradients`); before, the private gradient took a second forward pass
through the whole CNN, as ``shared_gradient_at="initial"`` still must (its shared gradient is taken at another
point). Three compiled rounds of the paper's CNN (:class:`jaxfl.models.TwoHeadCNN`) on the shapes of
``huang-jdp/figure1``'s n = 256 panel (39 records per silo, 5 local steps, Poisson rate 0.8192 in chunks of 40,
clip 15), ``--silos`` silos vmapped, timed interleaved (each round best of ``--repeats`` after a compiling call):

- ``joint DP, one pass``: the paper's joint DP as jaxfl runs it;
- ``joint DP, two passes``: the same step with the private gradient from its own forward pass
  (``shared_gradient_at="initial"``: the same computation's cost, the form joint DP took before df85f53);
- ``full DP``: every parameter shared, clipped and noised (``noise_on="all"``), for scale;
- ``PyTorch + Opacus hooks``: the same round as a PyTorch user would write it with Opacus: a loop over the silos
  and their local steps on a mirror of the CNN (:func:`torch_two_head_cnn`, the flax weights copied in) wrapped in
  ``opacus.GradSampleModule``; one forward and backward pass per step on the Poisson-sampled records gives the
  per-sample gradients of the shared layers (clipped by their joint norm, summed, Gaussian noise added) and the
  private ``fc1``'s plain ``.grad`` (Opacus also computes ``fc1``'s per-sample gradients, unused: its hooks cover
  every trainable layer); SGD on both, then the shared deltas averaged;
- ``PyTorch torch.func``: the same loop with ``vmap(grad(...))`` over the sampled records (``torch.func``), the
  private layer's per-example gradients summed.

``ratio`` = the faster PyTorch round / jaxfl's one-pass round (``one_pass_speedup`` = two passes / one pass),
each the best of ``--repeats`` calls over interleaved trials. ``gradient_rows`` splits the ratio in two: the
records whose gradients a round takes (jaxfl: every silo's whole chunk, since the vmapped loop over chunks runs
to the largest silo's sample and the chunk covers all 39 records; PyTorch: the sampled records only, expected
``silos x steps x 39 x rate``) and ``per_row_ratio``, the same ratio per such record; PyTorch runs with
``torch.set_num_threads(os.cpu_count())`` and JAX on all cores. The data are random images (timing does not
depend on the pixels). Correctness (untimed): on one silo's 16 records at clip 1 (every record clipped there), both
PyTorch forms' clipped shared sum and plain private sum equal :func:`jaxfl.privacy.clipping.clipped_grad_sum`
with ``unclipped`` marking ``fc1`` (max abs difference in the JSON). Without torch/opacus (the ``bench`` extra)
only the jaxfl rows run and ``ratio`` is the one-pass speedup.

Usage: python bench/joint_dp_step.py [--silos 16] [--repeats 5] [--trials 3] [--no-torch]
       [--out bench/results/joint_dp_step.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.algorithms import personalized
from jaxfl.data.federated import from_silos
from jaxfl.engine import initial_state, run_rounds
from jaxfl.studies.provenance import machine as processor, environment, write_benchmark
from jaxfl.models import nets
from jaxfl.privacy.clipping import clipped_grad_sum

RECORDS, LOCAL_STEPS, RATE, CHUNK, CLIP, NOISE, LR = 39, 5, 0.8192, 40, 15.0, 1.0, 0.05
MISSING_EXTRA = "needs torch and opacus: pip install -e '.[bench]'"
TORCH_FORMS = ("PyTorch + Opacus hooks", "PyTorch torch.func")
ROOT = Path(__file__).resolve().parents[1]
FLATTEN = (7, 7, 32)  # (H, W, C) the CNN flattens before both heads

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run by path (jaxfl bench): its sibling as a module
import clipping_vs_opacus


def _shared_unless_fc1(path, leaf) -> bool:
    return str(getattr(path[1], "key", path[1])) != "fc1"


FORMS = {
    "joint DP, one pass": dict(shared=_shared_unless_fc1, noise_on="shared"),
    "joint DP, two passes": dict(shared=_shared_unless_fc1, noise_on="shared", shared_gradient_at="initial"),
    "full DP": dict(shared=lambda path, leaf: True, noise_on="all"),
}


def silo_data(silos: int, seed: int = 0) -> list:
    """``silos`` pairs ``(x: [RECORDS, 28, 28, 1] float32, y: [RECORDS] int32)`` of random images."""
    rng = np.random.default_rng(seed)  # host-rng-ok: synthetic benchmark data
    return [(rng.standard_normal((RECORDS,) + nets.IMAGE28_INPUT_SHAPE).astype(np.float32),
             rng.integers(0, 10, RECORDS).astype(np.int32)) for _ in range(silos)]


def initial_params(seed: int = 0):
    return nets.TwoHeadCNN().init(jax.random.PRNGKey(seed), jnp.zeros((1,) + nets.IMAGE28_INPUT_SHAPE))


def program(form: str, silos: int, seed: int = 0):
    """``(run, state)``: one compiled round of ``form`` on ``silos`` silos of random images."""
    data = from_silos(silo_data(silos, seed))
    alg = personalized(nets.two_head_loss, client_opt=optax.sgd(LR), local_steps=LOCAL_STEPS, sampling_rate=RATE,
                       chunk=CHUNK, clip_norm=CLIP, noise_multiplier=NOISE, **FORMS[form])
    state = initial_state(alg, initial_params(seed), data.num_silos)
    run = jax.jit(lambda s: run_rounds(alg, s, data, jax.random.key(seed), 0, 1)[0])
    return run, state


# ------------------------------------------------------------------------------------------------
# PyTorch baselines


def torch_two_head_cnn():
    """The PyTorch mirror of :class:`jaxfl.models.TwoHeadCNN` (NCHW input, CHW flatten)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class TwoHeadCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 16, 5, padding=2), nn.Conv2d(16, 32, 5, padding=2)
            self.fc1, self.fc2 = nn.Linear(1568, 10), nn.Linear(1568, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = torch.flatten(F.max_pool2d(F.relu(self.conv2(x)), 2), 1)
            return 0.5 * (self.fc1(x) + self.fc2(x))

    return TwoHeadCNN()


def _flax_layer(params, name: str) -> dict:
    layer = params["params"][name]
    return layer if name.startswith("conv") else layer["dense0"]


def copy_flax_params(model, params) -> None:
    """Copies the flax :class:`jaxfl.models.TwoHeadCNN` ``params`` into :func:`torch_two_head_cnn` in place."""
    import torch

    with torch.no_grad():
        for name in ("conv1", "conv2", "fc1", "fc2"):
            layer, flax_layer = getattr(model, name), _flax_layer(params, name)
            weight = clipping_vs_opacus.kernel_to_torch(np.asarray(flax_layer["kernel"]), FLATTEN)
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight)))
            layer.bias.copy_(torch.from_numpy(np.array(flax_layer["bias"])))


def torch_mirror(mode: str, params):
    """``(model, forward)``: :func:`torch_two_head_cnn` holding flax ``params``, and what a step calls: the model
    itself (``mode="func"``) or its Opacus ``GradSampleModule`` (``mode="opacus"``, ``loss_reduction="sum"``)."""
    model = torch_two_head_cnn()
    copy_flax_params(model, params)
    if mode != "opacus":
        return model, model
    from opacus import GradSampleModule
    return model, GradSampleModule(model, loss_reduction="sum")


def torch_step_sums(mode: str, model, forward, x, y, clip: float):
    """One step's sums at ``model``'s parameters over the records ``x: [b, 1, 28, 28]``, ``y: [b]``:
    ``({name: clipped per-sample gradient sum of a shared parameter}, {name: plain gradient sum of fc1's})``.
    ``mode``: ``"opacus"`` (``forward`` is the ``GradSampleModule``) or ``"func"`` (``torch.func``)."""
    import torch
    from torch.nn import functional as F

    named = dict(model.named_parameters())
    private = {name for name in named if name.startswith("fc1.")}
    if mode == "opacus":
        forward.zero_grad(set_to_none=True)
        F.cross_entropy(forward(x), y, reduction="sum").backward()
        per_sample = {name: p.grad_sample for name, p in named.items() if name not in private}
        plain = {name: named[name].grad for name in private}
    else:
        from torch.func import functional_call, grad, vmap

        def loss_one(shared, own, xj, yj):
            return F.cross_entropy(functional_call(model, (shared, own), (xj[None],)), yj[None])

        shared = {name: p.detach() for name, p in named.items() if name not in private}
        own = {name: named[name].detach() for name in private}
        per_sample, own_per_sample = vmap(grad(loss_one, argnums=(0, 1)), in_dims=(None, None, 0, 0))(
            shared, own, x, y)
        plain = {name: g.sum(0) for name, g in own_per_sample.items()}
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample.values()))
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    clipped = {name: torch.einsum("i,i...->...", factor, g) for name, g in per_sample.items()}
    return clipped, plain


def torch_round(mode: str, silos: int, seed: int = 0):
    """A zero-argument callable running one joint-DP round in PyTorch (see the module docstring): each silo
    from the global shared layers and its own ``fc1``, ``LOCAL_STEPS`` Poisson-sampled DP-SGD steps, then the
    global shared layers += the silos' mean delta."""
    import torch

    model, forward = torch_mirror(mode, initial_params(seed))
    # default strides: channels-last ones made Opacus's conv2 sums wrong (clipping_vs_opacus.to_torch)
    xs = [(clipping_vs_opacus.to_torch(x), torch.from_numpy(y).long()) for x, y in silo_data(silos, seed)]
    named = dict(model.named_parameters())
    shared_names = [name for name in named if not name.startswith("fc1.")]
    global_shared = {name: named[name].detach().clone() for name in shared_names}
    own = [{name: p.detach().clone() for name, p in named.items() if name.startswith("fc1.")}
           for _ in range(silos)]
    generator = torch.Generator().manual_seed(seed)
    denominator = RATE * RECORDS

    def run():
        total_delta = {name: torch.zeros_like(p) for name, p in global_shared.items()}
        for silo, (x, y) in enumerate(xs):
            with torch.no_grad():
                for name, p in named.items():
                    p.copy_(global_shared[name] if name in global_shared else own[silo][name])
            for _ in range(LOCAL_STEPS):
                sampled = torch.rand(RECORDS, generator=generator) < RATE
                clipped, plain = torch_step_sums(mode, model, forward, x[sampled], y[sampled], CLIP)
                with torch.no_grad():
                    for name, g in clipped.items():
                        noise = torch.randn(g.shape, generator=generator)
                        named[name].sub_(LR * (g + NOISE * CLIP * noise) / denominator)
                    for name, g in plain.items():
                        named[name].sub_(LR * g / denominator)
            with torch.no_grad():
                for name in shared_names:
                    total_delta[name] += named[name] - global_shared[name]
                own[silo] = {name: named[name].detach().clone() for name in own[silo]}
        for name in shared_names:
            global_shared[name] += total_delta[name] / silos

    return run


def torch_correctness(records: int = 16, clip: float = 1.0) -> dict:
    """Max abs differences between each PyTorch form's step sums and jaxfl's ``clipped_grad_sum`` (``fc1``
    unclipped) on silo 0's first ``records`` records at ``clip``, and how many records were clipped."""
    import torch

    params = initial_params()
    x, y = silo_data(1)[0]
    x, y = x[:records], y[:records]
    unclipped = {"params": {"conv1": False, "conv2": False, "fc1": True, "fc2": False}}
    ours = clipped_grad_sum(nets.two_head_loss, params, jnp.asarray(x), jnp.asarray(y), jnp.ones(records), clip,
                            unclipped=unclipped)
    result = {"records": records, "clip_norm": clip, "jaxfl_num_clipped": float(ours.num_clipped)}
    for mode, label in zip(("opacus", "func"), TORCH_FORMS):
        model, forward = torch_mirror(mode, params)
        clipped, plain = torch_step_sums(mode, model, forward, clipping_vs_opacus.to_torch(x),
                                         torch.from_numpy(y).long(), clip)
        diff = 0.0
        for name, g in {**clipped, **plain}.items():
            layer, kind = name.split(".")
            flax_layer = _flax_layer(ours.value, layer)
            if kind == "weight":
                theirs = clipping_vs_opacus.kernel_from_torch(g.detach().numpy(), FLATTEN)
                mine = np.asarray(flax_layer["kernel"])
            else:
                theirs, mine = g.detach().numpy(), np.asarray(flax_layer["bias"])
            diff = max(diff, float(np.max(np.abs(theirs - mine))))
        result[label] = diff
    return result


def timed(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=3, help="interleaved passes over the forms")
    parser.add_argument("--no-torch", action="store_true", help="only the jaxfl rows")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "joint_dp_step.json"))
    args = parser.parse_args(argv)
    runs = {form: (lambda run, state: lambda: jax.block_until_ready(run(state)))(*program(form, args.silos))
            for form in FORMS}
    check = None
    if not args.no_torch:
        try:
            import opacus  # noqa: F401
            import torch
        except ImportError as exc:
            print(f"joint_dp_step: PyTorch rows skipped, {exc.name} is not installed ({MISSING_EXTRA})")
        else:
            torch.set_num_threads(os.cpu_count())
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            check = torch_correctness()
            print("correctness (max abs difference from jaxfl's sums): "
                  + ", ".join(f"{label} {check[label]:.2e}" for label in TORCH_FORMS))
            runs.update({label: torch_round(mode, args.silos)
                         for mode, label in zip(("opacus", "func"), TORCH_FORMS)})
    compile_seconds = {form: timed(run) for form, run in runs.items()}
    best = {form: float("inf") for form in runs}
    per_trial = {form: [] for form in runs}
    for _ in range(args.trials):
        for form, run in runs.items():
            seconds = min(timed(run) for _ in range(args.repeats))
            per_trial[form].append(seconds)
            best[form] = min(best[form], seconds)
    one, two = best["joint DP, one pass"], best["joint DP, two passes"]
    assert RECORDS <= CHUNK  # one chunk per step: every silo's gradients cover CHUNK rows
    rows = {"jaxfl": args.silos * LOCAL_STEPS * CHUNK,
            "PyTorch (expected)": args.silos * LOCAL_STEPS * RECORDS * RATE}
    table = [{"form": form, "seconds_per_round": best[form], "per_trial": per_trial[form],
              "first_call_seconds": compile_seconds[form], "relative_to_one_pass": best[form] / one}
             for form in runs]
    for row in table:
        trials = ", ".join(f"{s:.3f}" for s in row["per_trial"])
        print(f"{row['form']:>22}: {row['seconds_per_round']:.3f} s per round "
              f"({row['relative_to_one_pass']:.2f}x one pass; trials {trials})")
    torch_rows = [form for form in TORCH_FORMS if form in best]
    strongest = min(torch_rows, key=best.get) if torch_rows else None
    print(f"one-pass speedup (two passes / one pass): {two / one:.2f}")
    per_row_ratio = None
    if strongest:
        per_row_ratio = (best[strongest] / rows["PyTorch (expected)"]) / (one / rows["jaxfl"])
        print(f"ratio ({strongest} / jaxfl one pass): {best[strongest] / one:.2f}; gradient rows per round: jaxfl "
              f"{rows['jaxfl']}, PyTorch {rows['PyTorch (expected)']:.0f} expected; per row: {per_row_ratio:.2f}")
    record = {
        "benchmark": "joint_dp_step",
        "machine": {**processor(), "cores": os.cpu_count(), "device": jax.default_backend()},
        "environment": environment(),
        "ratio": best[strongest] / one if strongest else two / one,
        "baseline": (f"{strongest}: the same joint-DP round in PyTorch (the faster of Opacus GradSampleModule hooks "
                     "and torch.func vmap(grad), a Python loop over silos and local steps); ratio = its seconds / "
                     "jaxfl's one-pass round's, best of repeats over interleaved trials" if strongest else
                     "torch/opacus not installed: ratio = the two-pass round's seconds / the one-pass round's"),
        "one_pass_speedup": two / one,
        "one_pass_speedup_baseline": ("the same joint-DP round with the private head's gradient from a second "
                                      "forward pass (jaxfl's form before df85f53; what shared_gradient_at='initial' "
                                      "runs)"),
        "gradient_rows": {"per_round": rows, "per_row_ratio": per_row_ratio,
                          "note": "records whose gradients one round takes: jaxfl every silo's chunk of "
                                  f"{CHUNK} (>= its {RECORDS} records; the vmapped loop runs to the largest "
                                  "sample), PyTorch the Poisson-sampled ones (expectation); per_row_ratio = "
                                  "the ratio with each round's seconds divided by its rows"},
        "correctness": check,
        "setting": {"model": "TwoHeadCNN", "silos": args.silos, "records_per_silo": RECORDS,
                    "local_steps": LOCAL_STEPS, "sampling_rate": RATE, "chunk": CHUNK, "clip_norm": CLIP,
                    "noise_multiplier": NOISE, "learning_rate": LR, "repeats": args.repeats, "trials": args.trials},
        "rows": table,
    }
    print(f"wrote {write_benchmark(record, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
