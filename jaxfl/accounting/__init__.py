"""Privacy accounting: accountant objects over ``dp_accounting`` events, calibrators, per-silo ledgers, and
the papers' closed forms. Plain Python, consulted between compiled rounds, never traced.

Units throughout: epsilon in nats, delta a probability, noise multiplier = noise std / the bound on each
record's contribution (the L2 sensitivity under add/remove-one neighbours, half of it under replace-one;
see :func:`jaxfl.accounting.events.clipped_sum_gaussian`). jaxfl's own events live in
:mod:`jaxfl.accounting.events`; the accountants, by name, in one table (``ACCOUNTANTS``).
"""
from jaxfl.accounting import (closed_forms, dprec, events, group, increasing_samples, moments, sgd_noise, shuffle_model,
                              variance_reduced_noise, with_replacement)
from jaxfl.accounting.accountants import (ACCOUNTANTS, DEFAULT_RDP_ORDERS, Accountant, DpEvent,
                                          NeighboringRelation, PldAccountant, RdpAccountant,
                                          UnsupportedEventError, accountant_relations, available_accountants,
                                          check_relation, gaussian_event, make_accountant, rdp_to_delta,
                                          rdp_to_epsilon, register_accountant)
from jaxfl.accounting.calibrate import calibrate, epsilon_for, noise_multiplier_for
from jaxfl.accounting.cli import add_account_parser, run_account
from jaxfl.accounting.closed_forms import (advanced_composition, advanced_composition_per_step,
                                           amplify_poisson, amplify_with_replacement_ullman,
                                           amplify_without_replacement, analytic_gaussian_epsilon,
                                           analytic_gaussian_sigma, gaussian_sigma,
                                           gaussian_sigma_bun_steinke, parallel_composition)
from jaxfl.accounting.dprec import (DprecAccountant, DprecDpEvent, calibrate_clip_multiplier, default_delta,
                                    dpfedavg_epsilon, dprec_delta_overhead, dprec_epsilon, dprec_local_epsilon,
                                    dprec_round_event)
from jaxfl.accounting.events import (PvecDpEvent, RoundCycleDpEvent, RoundScheduleDpEvent, ShuffledGaussianDpEvent,
                                    clipped_sum_gaussian, clipped_sum_sensitivity)
from jaxfl.accounting.ledger import CentralLedger, SiloLedger

__all__ = [
    "ACCOUNTANTS", "DEFAULT_RDP_ORDERS", "Accountant", "DpEvent", "NeighboringRelation", "PldAccountant",
    "RdpAccountant", "UnsupportedEventError", "available_accountants", "gaussian_event", "make_accountant",
    "rdp_to_delta", "rdp_to_epsilon", "register_accountant", "accountant_relations", "check_relation",
    "events", "PvecDpEvent", "RoundScheduleDpEvent", "ShuffledGaussianDpEvent", "clipped_sum_gaussian",
    "clipped_sum_sensitivity",
    "calibrate", "epsilon_for", "noise_multiplier_for",
    "add_account_parser", "run_account",
    "closed_forms", "dprec", "group", "increasing_samples", "moments", "sgd_noise", "shuffle_model",
    "variance_reduced_noise", "with_replacement",
    "advanced_composition", "advanced_composition_per_step", "amplify_poisson",
    "amplify_with_replacement_ullman", "amplify_without_replacement", "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma", "gaussian_sigma", "gaussian_sigma_bun_steinke", "parallel_composition",
    "CentralLedger", "RoundCycleDpEvent", "SiloLedger",
    "DprecAccountant", "DprecDpEvent", "calibrate_clip_multiplier", "default_delta", "dpfedavg_epsilon",
    "dprec_delta_overhead", "dprec_epsilon", "dprec_local_epsilon", "dprec_round_event",
]
