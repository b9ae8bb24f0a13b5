"""The ``jaxfl account`` subcommand (ARCHITECTURE §3.5).

``jaxfl account --accountant {rdp,pld} --noise-multiplier S --sampling-rate Q --steps T --delta D [--json]``
prints epsilon; with ``--target-epsilon E`` instead of ``--noise-multiplier`` it prints the smallest noise
multiplier meeting (E, D). The mechanism is the Poisson-subsampled Gaussian with add/remove-one neighbours
(``--sampling-rate 1`` is the plain Gaussian). Bad values raise ``ValueError`` naming the flag and value; the
top-level ``jaxfl`` entry point turns that into one error line and exit status 2.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from jaxfl.accounting import _validate
from jaxfl.accounting.accountants import available_accountants
from jaxfl.accounting.calibrate import epsilon_for, noise_multiplier_for


def add_account_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers ``account`` on an ``argparse`` subparsers object; returns the new parser. The parser's
    defaults hold ``func=run_account``."""
    parser = subparsers.add_parser(
        "account",
        help="privacy accounting for the (Poisson-subsampled) Gaussian mechanism",
        description="Epsilon of T Poisson-subsampled Gaussian steps (add/remove-one neighbours), or the "
                    "smallest noise multiplier meeting a target epsilon.")
    parser.add_argument("--accountant", choices=available_accountants(), default="rdp",
                        help="accountant (default: rdp)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--noise-multiplier", type=float, metavar="S",
                      help="noise std / L2 sensitivity; prints epsilon")
    mode.add_argument("--target-epsilon", type=float, metavar="E",
                      help="target epsilon; prints the smallest noise multiplier meeting (E, D)")
    parser.add_argument("--sampling-rate", type=float, default=1.0, metavar="Q",
                        help="Poisson sampling probability in (0, 1] (default: 1, the plain Gaussian)")
    parser.add_argument("--steps", type=int, required=True, metavar="T", help="number of steps")
    parser.add_argument("--delta", type=float, required=True, metavar="D", help="delta in (0, 1)")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(func=run_account)
    return parser


def run_account(args: argparse.Namespace) -> int:
    """Runs ``jaxfl account``; prints the result to stdout and returns the exit status 0.

    Raises ``ValueError`` (message naming the flag and the bad value) on bad input.
    """
    name = args.accountant
    if name not in available_accountants():
        raise ValueError(f"--accountant: unknown accountant {name!r}; choose from "
                         f"{', '.join(available_accountants())}")
    delta = _validate.delta(args.delta, "--delta")
    q = _validate.sampling_rate(args.sampling_rate, "--sampling-rate")
    if args.noise_multiplier is not None:
        sigma = _validate.positive(args.noise_multiplier, "--noise-multiplier")
        steps = _validate.count(args.steps, "--steps")
        eps = epsilon_for(sigma, q, steps, delta, accountant=name)
        result = {"epsilon": eps, "delta": delta, "accountant": name}
        value = eps
    else:
        target = _validate.epsilon(args.target_epsilon, "--target-epsilon")
        steps = _validate.count(args.steps, "--steps", minimum=1)
        sigma = noise_multiplier_for(target, q, steps, delta, accountant=name)
        result = {"noise_multiplier": sigma, "epsilon": target, "delta": delta, "accountant": name}
        value = sigma
    print(json.dumps(result) if args.json else repr(float(value)))
    return 0
