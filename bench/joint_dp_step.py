"""Seed 001's joint-DP round: the shared part's noisy gradient and the private head's plain one in one forward pass.

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
- ``full DP``: every parameter shared, clipped and noised (``noise_on="all"``), for scale.

``ratio`` = two passes / one pass. The data are random images (timing does not depend on the pixels). Not
measured: a PyTorch/Opacus joint-DP step (one backward pass could give Opacus's per-sample gradients of the
shared layers beside the private layer's plain ``.grad``); no such baseline is built yet.

Usage: python bench/joint_dp_step.py [--silos 16] [--repeats 5] [--trials 3] [--out bench/results/joint_dp_step.json]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.algorithms import personalized
from jaxfl.data.federated import from_silos
from jaxfl.engine import initial_state, run_rounds
from jaxfl.experiments.report import cpu_model, environment, write_benchmark
from jaxfl.models import nets

RECORDS, LOCAL_STEPS, RATE, CHUNK, CLIP, NOISE = 39, 5, 0.8192, 40, 15.0, 1.0
ROOT = Path(__file__).resolve().parents[1]


def _shared_unless_fc1(path, leaf) -> bool:
    return str(getattr(path[1], "key", path[1])) != "fc1"


FORMS = {
    "joint DP, one pass": dict(shared=_shared_unless_fc1, noise_on="shared"),
    "joint DP, two passes": dict(shared=_shared_unless_fc1, noise_on="shared", shared_gradient_at="initial"),
    "full DP": dict(shared=lambda path, leaf: True, noise_on="all"),
}


def program(form: str, silos: int, seed: int = 0):
    """``(run, state)``: one compiled round of ``form`` on ``silos`` silos of random images."""
    rng = np.random.default_rng(seed)  # host-rng-ok: synthetic benchmark data
    data = from_silos([(rng.standard_normal((RECORDS,) + nets.IMAGE28_INPUT_SHAPE).astype(np.float32),
                        rng.integers(0, 10, RECORDS).astype(np.int32)) for _ in range(silos)])
    alg = personalized(nets.two_head_loss, client_opt=optax.sgd(0.05), local_steps=LOCAL_STEPS, sampling_rate=RATE,
                       chunk=CHUNK, clip_norm=CLIP, noise_multiplier=NOISE, **FORMS[form])
    params = nets.TwoHeadCNN().init(jax.random.PRNGKey(seed), jnp.zeros((1,) + nets.IMAGE28_INPUT_SHAPE))
    state = initial_state(alg, params, data.num_silos)
    run = jax.jit(lambda s: run_rounds(alg, s, data, jax.random.key(seed), 0, 1)[0])
    return run, state


def timed(run, state) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(run(state))
    return time.perf_counter() - t0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=3, help="interleaved passes over the forms")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "joint_dp_step.json"))
    args = parser.parse_args(argv)
    programs, compile_seconds = {}, {}
    for form in FORMS:
        run, state = program(form, args.silos)
        compile_seconds[form] = timed(run, state)
        programs[form] = (run, state)
    best = {form: float("inf") for form in FORMS}
    per_trial = {form: [] for form in FORMS}
    for _ in range(args.trials):
        for form, (run, state) in programs.items():
            seconds = min(timed(run, state) for _ in range(args.repeats))
            per_trial[form].append(seconds)
            best[form] = min(best[form], seconds)
    one, two = best["joint DP, one pass"], best["joint DP, two passes"]
    rows = [{"form": form, "seconds_per_round": best[form], "per_trial": per_trial[form],
             "first_call_seconds": compile_seconds[form], "relative_to_one_pass": best[form] / one}
            for form in FORMS]
    for row in rows:
        trials = ", ".join(f"{s:.3f}" for s in row["per_trial"])
        print(f"{row['form']:>22}: {row['seconds_per_round']:.3f} s per round "
              f"({row['relative_to_one_pass']:.2f}x one pass; trials {trials})")
    print(f"ratio (two passes / one pass): {two / one:.2f}")
    record = {
        "benchmark": "joint_dp_step",
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "device": jax.default_backend()},
        "environment": environment(),
        "ratio": two / one,
        "baseline": ("the same joint-DP round with the private head's gradient from a second forward pass (jaxfl's "
                     "form before df85f53; what shared_gradient_at='initial' runs); ratio = its seconds / the "
                     "one-pass round's, best of repeats over interleaved trials. No PyTorch/Opacus joint-DP "
                     "baseline is built"),
        "setting": {"model": "TwoHeadCNN", "silos": args.silos, "records_per_silo": RECORDS,
                    "local_steps": LOCAL_STEPS, "sampling_rate": RATE, "chunk": CHUNK, "clip_norm": CLIP,
                    "noise_multiplier": NOISE, "repeats": args.repeats, "trials": args.trials},
        "rows": rows,
    }
    print(f"wrote {write_benchmark(record, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
