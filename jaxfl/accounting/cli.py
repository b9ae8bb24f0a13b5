"""The ``jaxfl account`` subcommand (ARCHITECTURE §3.5).

Gaussian mechanism (any accountant but ``dprec``)::

    jaxfl account --accountant {rdp,pld,...} --noise-multiplier S [--sampling-rate Q] --steps T --delta D [--json]

prints epsilon; with ``--target-epsilon E`` instead of ``--noise-multiplier`` it prints the smallest noise
multiplier meeting (E, D). The mechanism is the Poisson-subsampled Gaussian with add/remove-one neighbours
(``--sampling-rate 1``, the default, is the plain Gaussian). ``--steps``, ``--delta`` and one of
``--noise-multiplier`` / ``--target-epsilon`` are required (argparse error, exit status 2, when missing).

DP-REC (Triastcyn et al., Alg. 7; :mod:`jaxfl.accounting.dprec`)::

    jaxfl account --accountant dprec --clip-multiplier c --bits b --clients-per-round B --clients N \\
                  --rounds T [--delta D] [--json]

prints the central epsilon (add/remove one client) of ``T`` rounds, each drawing ``B`` of ``N`` clients
with replacement, every client update clipped to ``c`` prior standard deviations and sent as a ``b``-bit
index (``b`` = total bits over all blocks); ``--delta`` defaults to ``N^-1.1``. ``--json`` prints
``{"epsilon", "delta", "accountant": "dprec", "bits", "clients", "clients_per_round", "rounds",
"clip_multiplier", "delta_overhead", "order"}`` (``order``: the optimal Rényi order ``alpha = lambda + 1``).
Where the importance-sampling overhead ``12 T B e^{c^2} / 2^b`` leaves no valid guarantee (``delta`` <=
overhead) it prints ``inf`` (``--json``: ``"epsilon": "inf"``, a string, because JSON has no infinity --
the same convention as ``results.json``), writes a one-line explanation to stderr and exits with status 0.
With ``--target-epsilon E`` instead of ``--clip-multiplier`` it prints the largest clip multiplier meeting
(E, D).

A flag that does not belong to the chosen accountant (e.g. ``--bits`` with ``rdp``, ``--steps`` with
``dprec``) or a missing DP-REC flag, and any bad value, raise ``ValueError`` naming the flag; the top-level
``jaxfl`` entry point turns that into one error line and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from jaxfl import checks
from jaxfl.accounting import dprec as _dprec
from jaxfl.accounting.accountants import available_accountants
from jaxfl.accounting.calibrate import epsilon_for, noise_multiplier_for

DPREC = "dprec"
# Flags of each mode, as (namespace attribute, flag).
_GAUSSIAN_ONLY = (("noise_multiplier", "--noise-multiplier"), ("sampling_rate", "--sampling-rate"),
                  ("steps", "--steps"))
_DPREC_ONLY = (("clip_multiplier", "--clip-multiplier"), ("bits", "--bits"),
               ("clients_per_round", "--clients-per-round"), ("clients", "--clients"), ("rounds", "--rounds"))
_DPREC_REQUIRED = _DPREC_ONLY[1:]


def _gaussian_missing(args: Any) -> str | None:
    """What the Gaussian mode requires that ``args`` lacks (argparse's wording), or None."""
    if getattr(args, "noise_multiplier", None) is None and getattr(args, "target_epsilon", None) is None:
        return "one of the arguments --noise-multiplier --target-epsilon is required"
    missing = [flag for attr, flag in (("steps", "--steps"), ("delta", "--delta"))
               if getattr(args, attr, None) is None]
    return f"the following arguments are required: {', '.join(missing)}" if missing else None


class _AccountParser(argparse.ArgumentParser):
    """Checks the Gaussian mode's required flags at parse time (argparse error, exit status 2), as before
    DP-REC was added. DP-REC's flags, and DP-REC flags given to a Gaussian accountant, are checked by
    :func:`run_account` (``ValueError`` naming the flag)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(namespace, "accountant", None) != DPREC \
                and not any(getattr(namespace, attr, None) is not None for attr, _ in _DPREC_ONLY):
            missing = _gaussian_missing(namespace)
            if missing:
                self.error(missing)
        return namespace, extras


def add_account_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers ``account`` on an ``argparse`` subparsers object; returns the new parser. The parser's
    defaults hold ``func=run_account``, so a tool of your own gains ``jaxfl account`` as a subcommand.

    Example:
      >>> import argparse
      >>> parser = argparse.ArgumentParser(prog="mytool")
      >>> _ = add_account_parser(parser.add_subparsers())
      >>> args = parser.parse_args(["account", "--noise-multiplier", "1.1", "--sampling-rate", "0.01",
      ...                           "--steps", "1000", "--delta", "1e-5"])
      >>> args.func is run_account
      True
    """
    parser = subparsers.add_parser(
        "account",
        help="privacy accounting: (Poisson-subsampled) Gaussian mechanism, or DP-REC",
        description="Epsilon of T Poisson-subsampled Gaussian steps (add/remove-one neighbours), or the "
                    "smallest noise multiplier meeting a target epsilon; with --accountant dprec, epsilon of "
                    "a DP-REC run (Triastcyn et al., Alg. 7) or the largest clip multiplier meeting a target.")
    # argparse has no post-parse hook for subparsers: the parser object becomes an _AccountParser (it adds
    # no state, only the check of the Gaussian mode's required flags).
    parser.__class__ = _AccountParser
    parser.add_argument("--accountant", choices=available_accountants(), default="rdp",
                        help="accountant (default: rdp)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--noise-multiplier", type=float, metavar="S",
                      help="Gaussian: noise std / L2 sensitivity; prints epsilon")
    mode.add_argument("--clip-multiplier", type=float, metavar="c",
                      help="dprec: clip norm / prior std (C = c sigma); prints epsilon")
    mode.add_argument("--target-epsilon", type=float, metavar="E",
                      help="target epsilon; prints the smallest noise multiplier (Gaussian) or the largest "
                           "clip multiplier (dprec) meeting (E, D)")
    parser.add_argument("--sampling-rate", type=float, default=None, metavar="Q",
                        help="Gaussian: Poisson sampling probability in (0, 1] (default: 1, the plain Gaussian)")
    parser.add_argument("--steps", type=int, default=None, metavar="T", help="Gaussian: number of steps")
    parser.add_argument("--bits", type=int, default=None, metavar="b",
                        help="dprec: total index bits of one client update (all blocks)")
    parser.add_argument("--clients-per-round", type=int, default=None, metavar="B",
                        help="dprec: clients drawn with replacement per round")
    parser.add_argument("--clients", type=int, default=None, metavar="N", help="dprec: federation size")
    parser.add_argument("--rounds", type=int, default=None, metavar="T", help="dprec: number of rounds")
    parser.add_argument("--delta", type=float, default=None, metavar="D",
                        help="delta in (0, 1) (required, except for dprec: default N^-1.1)")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(func=run_account)
    return parser


def _reject(args: Any, flags, name: str) -> None:
    for attr, flag in flags:
        if getattr(args, attr, None) is not None:
            hint = " (a DP-REC flag: use --accountant dprec)" if name != DPREC else ""
            raise ValueError(f"{flag} does not apply to --accountant {name}{hint}")


def _json_float(x: float) -> float | str:
    """``x``, or ``"inf"`` / ``"nan"`` where JSON has no number for it."""
    return x if math.isfinite(x) else str(x)


def run_account(args: argparse.Namespace) -> int:
    """Runs ``jaxfl account``; prints the result to stdout and returns the exit status 0.

    Raises ``ValueError`` (message naming the flag and the bad value) on bad input, a missing flag, or a
    flag of the other mode.

    Example (epsilon of 1,000 steps at noise multiplier 1.1, sampling rate 0.01, delta 1e-5, by RDP):
      >>> import argparse
      >>> parser = argparse.ArgumentParser(prog="mytool")
      >>> _ = add_account_parser(parser.add_subparsers())
      >>> run_account(parser.parse_args(["account", "--noise-multiplier", "1.1", "--sampling-rate", "0.01",
      ...                                "--steps", "1000", "--delta", "1e-5"]))
      1.71177...
      0
    """
    name = args.accountant
    if name not in available_accountants():
        raise ValueError(f"--accountant: unknown accountant {name!r}; choose from "
                         f"{', '.join(available_accountants())}")
    if name == DPREC:
        return _run_dprec(args)
    _reject(args, _DPREC_ONLY, name)
    missing = _gaussian_missing(args)
    if missing:
        raise ValueError(f"--accountant {name}: {missing}")
    delta = checks.delta("--delta", args.delta, scalar=True)
    rate = getattr(args, "sampling_rate", None)
    q = checks.sampling_rate("--sampling-rate", 1.0 if rate is None else rate)
    if args.noise_multiplier is not None:
        sigma = checks.positive_float("--noise-multiplier", args.noise_multiplier)
        steps = checks.non_negative_int("--steps", args.steps)
        eps = epsilon_for(sigma, q, steps, delta, accountant=name)
        result = {"epsilon": eps, "delta": delta, "accountant": name}
        value = eps
    else:
        target = checks.epsilon("--target-epsilon", args.target_epsilon)
        steps = checks.positive_int("--steps", args.steps)
        sigma = noise_multiplier_for(target, q, steps, delta, accountant=name)
        result = {"noise_multiplier": sigma, "epsilon": target, "delta": delta, "accountant": name}
        value = sigma
    print(json.dumps(result) if args.json else repr(float(value)))
    return 0


def _run_dprec(args: argparse.Namespace) -> int:
    _reject(args, _GAUSSIAN_ONLY, DPREC)
    clip = getattr(args, "clip_multiplier", None)
    target = getattr(args, "target_epsilon", None)
    if clip is None and target is None:
        raise ValueError("--accountant dprec needs --clip-multiplier or --target-epsilon")
    missing = [flag for attr, flag in _DPREC_REQUIRED if getattr(args, attr, None) is None]
    if missing:
        raise ValueError(f"--accountant dprec needs {', '.join(missing)}")
    bits = checks.positive_int("--bits", args.bits)
    clients = checks.integer("--clients", args.clients, minimum=2)
    per_round = checks.positive_int("--clients-per-round", args.clients_per_round)
    rounds = checks.integer("--rounds", args.rounds, minimum=1 if clip is None else 0)
    delta = (_dprec.default_delta(clients) if getattr(args, "delta", None) is None
             else checks.delta("--delta", args.delta, scalar=True))
    setting = {"delta": delta, "accountant": DPREC, "bits": bits, "clients": clients,
               "clients_per_round": per_round, "rounds": rounds}
    if clip is not None:
        clip = checks.positive_float("--clip-multiplier", clip)
        acc = _dprec.dprec_accountant(clip, bits=bits, num_clients=clients, clients_per_round=per_round,
                                      rounds=rounds)
        eps, order = acc.epsilon_and_order(delta)
        reason = acc.infeasibility(delta)
        if reason is not None:
            print(f"jaxfl: {reason}", file=sys.stderr)
        result = {"epsilon": _json_float(eps), **setting, "clip_multiplier": clip,
                  "delta_overhead": _json_float(acc.delta_overhead),
                  "order": None if math.isnan(order) else order}
        value = eps
    else:
        target = checks.epsilon("--target-epsilon", target)
        try:
            clip = _dprec.calibrate_clip_multiplier(target, bits=bits, num_clients=clients,
                                                    clients_per_round=per_round, rounds=rounds, delta=delta)
        except ValueError as e:
            raise ValueError(f"--target-epsilon: {e}") from None
        result = {"clip_multiplier": clip, "epsilon": target, **setting}
        value = clip
    print(json.dumps(result) if args.json else repr(float(value)))
    return 0
